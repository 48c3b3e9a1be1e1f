#!/usr/bin/env python3
"""Writes a pods watch stream (one JSON watch event per line, as `kubectl get pods --watch
--output-watch-events -o json` would with jq -c) of about --mb MiB, for the ingest memory
benchmark. Each training pod goes ADDED (Pending) -> MODIFIED (scheduled) -> MODIFIED (Running)
-> MODIFIED (Succeeded or Failed) -> DELETED; pods are about 3 KiB, like real GPU pods with
labels, annotations, a container with GPU limits and status conditions."""
import argparse
import datetime
import json
import os

T0 = datetime.datetime(2026, 11, 1, tzinfo=datetime.timezone.utc)


def iso(seconds):
    return (T0 + datetime.timedelta(seconds=seconds)).strftime("%Y-%m-%dT%H:%M:%SZ")


def pod(i, phase, at, rv):
    name = f"train-{i:08d}-worker-0"
    team = ["vision", "nlp", "speech", "recsys"][i % 4]
    node = f"gpu-node-{i % 256:03d}"
    created = iso(at[0])
    obj = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": f"team-{team}",
            "uid": f"{i:08x}-1111-4222-8333-{i:012x}",
            "resourceVersion": str(rv),
            "creationTimestamp": created,
            "labels": {
                "app.kubernetes.io/name": "trainer",
                "batch.kubernetes.io/job-name": f"train-{i:08d}",
                "job-name": f"train-{i:08d}",
                "kueue.x-k8s.io/queue-name": f"{team}-queue",
                "team": team,
            },
            "annotations": {
                "kueue.x-k8s.io/workload": f"job-train-{i:08d}-{i % 99991:05x}",
                "kubectl.kubernetes.io/last-applied-configuration": json.dumps({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}}),
            },
            "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job", "name": f"train-{i:08d}", "uid": f"{i:08x}-aaaa-4bbb-8ccc-{i:012x}", "controller": True, "blockOwnerDeletion": True}],
        },
        "spec": {
            "containers": [{
                "name": "trainer",
                "image": "nvcr.io/nvidia/pytorch:24.10-py3",
                "command": ["torchrun", "--nproc_per_node=8", "train.py", "--config", f"configs/{team}.yaml"],
                "env": [{"name": "NCCL_DEBUG", "value": "WARN"}, {"name": "RUN_ID", "value": f"run-{i}"}],
                "resources": {"limits": {"nvidia.com/gpu": "8", "memory": "512Gi"}, "requests": {"cpu": "64", "nvidia.com/gpu": "8", "memory": "512Gi"}},
                "volumeMounts": [{"mountPath": "/data", "name": "data"}, {"mountPath": "/dev/shm", "name": "shm"}],
                "terminationMessagePath": "/dev/termination-log",
                "terminationMessagePolicy": "File",
                "imagePullPolicy": "IfNotPresent",
            }],
            "nodeSelector": {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"},
            "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
            "volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": f"{team}-data"}}, {"name": "shm", "emptyDir": {"medium": "Memory"}}],
            "restartPolicy": "Never",
            "schedulerName": "default-scheduler",
            "priorityClassName": "training",
        },
        "status": {"phase": phase, "qosClass": "Burstable"},
    }
    conditions = [{"type": "PodScheduled", "status": "False" if len(at) < 2 else "True", "lastTransitionTime": iso(at[-1])}]
    if len(at) >= 2:
        obj["spec"]["nodeName"] = node
    if len(at) >= 3:
        obj["status"]["startTime"] = iso(at[2])
        conditions += [{"type": t, "status": "True" if phase == "Running" else "False", "lastTransitionTime": iso(at[-1])} for t in ("Initialized", "Ready", "ContainersReady")]
        state = {"running": {"startedAt": iso(at[2])}} if phase == "Running" else {
            "terminated": {"exitCode": 0 if phase == "Succeeded" else 137, "reason": "Completed" if phase == "Succeeded" else "OOMKilled", "startedAt": iso(at[2]), "finishedAt": iso(at[-1])}}
        obj["status"]["containerStatuses"] = [{"name": "trainer", "ready": phase == "Running", "restartCount": 0, "image": "nvcr.io/nvidia/pytorch:24.10-py3", "imageID": "sha256:" + f"{i:064x}", "containerID": f"containerd://{i:064x}", "state": state}]
        obj["status"]["hostIP"] = f"10.0.{i % 256}.1"
        obj["status"]["podIP"] = f"10.244.{i % 256}.{i % 250 + 2}"
    obj["status"]["conditions"] = conditions
    return obj


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--mb", type=int, required=True, help="size of the stream, MiB")
    ap.add_argument("--out", required=True, help="file to write (atomically)")
    args = ap.parse_args()
    goal = args.mb << 20
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    tmp = args.out + ".tmp"
    written, rv, i = 0, 1000, 0
    with open(tmp, "w", buffering=8 << 20) as f:
        while written < goal:
            start = i * 30
            steps = [("ADDED", "Pending", [start]), ("MODIFIED", "Pending", [start, start + 20]),
                     ("MODIFIED", "Running", [start, start + 20, start + 45]),
                     ("MODIFIED", "Succeeded" if i % 7 else "Failed", [start, start + 20, start + 45, start + 3600 + i % 7200])]
            for event, phase, at in steps + [("DELETED", steps[-1][1], steps[-1][2])]:
                rv += 1
                line = json.dumps({"type": event, "object": pod(i, phase, at, rv)}, separators=(",", ":")) + "\n"
                f.write(line)
                written += len(line)
            i += 1
    os.replace(tmp, args.out)
    print(json.dumps({"bytes": written, "pods": i, "versions": i * 5}))


if __name__ == "__main__":
    main()
