-- 10  The Kubernetes and Kueue objects as they were last seen.
--
-- The store keeps every version of every object (one row per watch event or snapshot).
-- The accounting needs each object's final word: its last phase, its labels, its annotations.
-- "Last" is the version observed latest; `seq` (position in its stream) breaks ties.
--
-- Inputs: pods, jobs, workloads, namespaces, nodes (store tables); settings (one row from the
-- configuration file: team_label, thresholds, prices, idle policy).

-- One row per pod incarnation. Pods reuse names (a PyTorchJob's `-master-0`, a StatefulSet, a
-- bare pod deleted and created again), so a pod is keyed by its uid (`pod_key`; namespace/name
-- where the capture has no uid) and `incarnation` numbers the pods of one name by start.
-- `first_seen` is status.startTime, else the first time the pod was seen at all. A sample
-- naming the pod belongs to the incarnation that started last at or before it (the first one
-- for samples before any start): [valid_from_ms, valid_to_ms), valid_to_ms null for the last.
CREATE OR REPLACE VIEW pods_latest AS
WITH versions AS (
    SELECT *, COALESCE(uid, namespace || '/' || name) AS pod_key FROM pods
)
SELECT namespace, pod, pod_key, uid, incarnation, node_name, phase, reason, owner_kind, owner_name, owner_uid,
       job_name, workload_name, start_time, first_seen, disruption_target, disruption_reason,
       last_termination_reason, last_exit_code, labels, last_seen, gpu_request,
       CASE WHEN incarnation = 1 THEN CAST(0 AS BIGINT) ELSE epoch_ms(first_seen) END AS valid_from_ms,
       epoch_ms(next_first_seen) AS valid_to_ms
FROM (
    SELECT *,
           ROW_NUMBER() OVER (PARTITION BY namespace, pod ORDER BY first_seen, pod_key) AS incarnation,
           LEAD(first_seen) OVER (PARTITION BY namespace, pod ORDER BY first_seen, pod_key) AS next_first_seen
    FROM (
        SELECT l.namespace, l.name AS pod, l.pod_key, l.uid, l.node_name, l.phase, l.reason, l.owner_kind, l.owner_name,
               l.owner_uid, l.job_name, l.workload_name, l.start_time, f.first_seen, l.disruption_target,
               l.disruption_reason, l.last_termination_reason, l.last_exit_code, l.labels, l.observed_at AS last_seen,
               l.gpu_request
        FROM (
            -- The first start (or sighting) of each pod, over all its versions: an aggregate
            -- joined to the latest version, not a window over each pod's versions (a window
            -- without ORDER BY holds the whole table at once, outside the memory pool).
            SELECT pod_key, COALESCE(MIN(start_time), MIN(observed_at)) AS first_seen
            FROM versions
            GROUP BY pod_key
        ) f
        JOIN (
            SELECT * FROM (
                SELECT *, ROW_NUMBER() OVER (PARTITION BY pod_key ORDER BY observed_at DESC, seq DESC) AS version_rank
                FROM versions
            ) WHERE version_rank = 1
        ) l ON l.pod_key IS NOT DISTINCT FROM f.pod_key
    )
);

-- One row per job (namespace, kind, name): batch/v1 Jobs, JobSets, RayJobs, PyTorchJobs, ...
-- `deleted_at`: when its deletion was seen (a job deleted before it finished was cancelled).
CREATE OR REPLACE VIEW jobs_latest AS
SELECT namespace, kind, name AS job, uid, owner_kind, owner_name, owner_uid, completion_time,
       outcome, outcome_reason, labels, annotations,
       CASE WHEN event_type = 'DELETED' THEN observed_at END AS deleted_at
FROM (
    SELECT j.*, ROW_NUMBER() OVER (PARTITION BY namespace, kind, name ORDER BY observed_at DESC, seq DESC) AS version_rank
    FROM jobs j
) WHERE version_rank = 1;

-- The latest version of each DRA DeviceClass.
CREATE OR REPLACE VIEW device_classes_latest AS
SELECT name, extended_resource_name, driver FROM (
    SELECT *, ROW_NUMBER() OVER (PARTITION BY name ORDER BY observed_at DESC, seq DESC) AS version_rank
    FROM device_classes
) WHERE version_rank = 1 AND event_type <> 'DELETED';

-- GPUs a Workload asks for through DRA (docs/accounting.md "DRA"), per pod set summed: each pod's
-- claims made from a ResourceClaimTemplate whose requests ask for devices of a GPU device
-- class (`[accounting] gpu_device_classes`; an `All` request counts as one device), and
-- extended resources that count GPU devices: the `extendedResourceName` of a GPU DeviceClass,
-- or a name Kueue's device class mappings give GPU classes (`gpu_resource_names`). The
-- `nvidia.com/*` resources are counted already (`gpu_count`).
CREATE OR REPLACE VIEW workload_dra_gpus AS
WITH latest AS (
    SELECT namespace, name, claim_templates, pod_resources FROM (
        SELECT namespace, name, claim_templates, pod_resources,
               ROW_NUMBER() OVER (PARTITION BY namespace, name ORDER BY observed_at DESC, seq DESC) AS version_rank
        FROM workloads
    ) WHERE version_rank = 1 AND (claim_templates IS NOT NULL OR pod_resources IS NOT NULL)
),
template_gpus AS (
    SELECT t.namespace, t.name, SUM(COALESCE(t.count, 1)) AS gpus
    FROM (
        SELECT * FROM (
            SELECT *, ROW_NUMBER() OVER (PARTITION BY namespace, name, request ORDER BY observed_at DESC, seq DESC) AS version_rank
            FROM resource_claim_templates
        ) WHERE version_rank = 1 AND event_type <> 'DELETED'
    ) t
    JOIN gpu_device_classes g ON g.device_class = t.device_class
    GROUP BY t.namespace, t.name
),
gpu_extended_resources AS (
    SELECT resource FROM gpu_resource_names
    UNION
    SELECT d.extended_resource_name FROM device_classes_latest d JOIN gpu_device_classes g ON g.device_class = d.name
    WHERE d.extended_resource_name IS NOT NULL AND d.extended_resource_name <> 'nvidia.com/gpu'
      AND d.extended_resource_name NOT LIKE 'nvidia.com/mig-%'
)
SELECT namespace, name AS workload, SUM(gpus) AS dra_gpus
FROM (
    SELECT l.namespace, l.name, CAST(CAST(label(l.claim_templates, tg.name) AS DECIMAL(38, 0)) AS BIGINT) * tg.gpus AS gpus
    FROM template_gpus tg
    JOIN latest l ON l.namespace = tg.namespace AND label(l.claim_templates, tg.name) IS NOT NULL
    UNION ALL
    SELECT l.namespace, l.name, CAST(CAST(label(l.pod_resources, e.resource) AS DECIMAL(38, 0)) AS BIGINT)
    FROM gpu_extended_resources e
    CROSS JOIN latest l
    WHERE label(l.pod_resources, e.resource) IS NOT NULL
)
GROUP BY namespace, name;

-- One row per Workload (namespace, name), with the ClusterQueue that admitted it: Kueue clears
-- status.admission on eviction, so the latest version may not name it; any version that did counts
-- (a Workload moved between ClusterQueues reports the alphabetically last one).
CREATE OR REPLACE VIEW workloads_latest AS
SELECT namespace, name AS workload, uid, created_at, owner_kind, owner_name, owner_uid, queue_name,
       admitted_cluster_queue, labels, annotations,
       -- With DRA devices of GPU classes added (workload_dra_gpus: whole GPUs all).
       CASE WHEN gpu_count IS NULL AND dra_gpus IS NULL THEN NULL ELSE COALESCE(gpu_count, 0) + COALESCE(dra_gpus, 0) END AS gpu_count,
       -- A store ingested before whole_gpu_count existed has only gpu_count (MIG slices included).
       CASE WHEN COALESCE(whole_gpu_count, gpu_count) IS NULL AND dra_gpus IS NULL THEN NULL
            ELSE COALESCE(whole_gpu_count, gpu_count, 0) + COALESCE(dra_gpus, 0) END AS whole_gpu_count,
       CASE WHEN event_type = 'DELETED' THEN observed_at END AS deleted_at
FROM (
    SELECT l.*, a.admitted_cluster_queue, d.dra_gpus
    FROM (SELECT namespace AS a_namespace, name AS a_name, MAX(cluster_queue) AS admitted_cluster_queue
          FROM workloads GROUP BY namespace, name) a
    JOIN (
        SELECT * FROM (
            SELECT w.*, ROW_NUMBER() OVER (PARTITION BY namespace, name ORDER BY observed_at DESC, seq DESC) AS version_rank
            FROM workloads w
        ) WHERE version_rank = 1
    ) l ON (l.namespace IS NOT DISTINCT FROM a.a_namespace) AND (l.name IS NOT DISTINCT FROM a.a_name)
    LEFT JOIN workload_dra_gpus d ON d.namespace = l.namespace AND d.workload = l.name
);

-- One row per namespace, with its team label (if any).
CREATE OR REPLACE VIEW namespaces_latest AS
-- A label with an empty value counts as absent (docs/accounting.md "Team").
SELECT n.name AS namespace, NULLIF(label(n.labels, s.team_label), '') AS team_label, n.labels
FROM settings s CROSS JOIN (
    SELECT *, ROW_NUMBER() OVER (PARTITION BY name ORDER BY observed_at DESC, seq DESC) AS version_rank
    FROM namespaces
) n
WHERE n.version_rank = 1;

-- One row per node, reachable by its name and by its kubernetes.io/hostname label (the DCGM
-- `Hostname` label carries one of the two), with its nvidia.com/gpu capacity (58_quota.sql).
CREATE OR REPLACE VIEW nodes_latest AS
SELECT name AS node, hostname_label, gpu_product, labels, gpu_capacity
FROM (
    SELECT *, ROW_NUMBER() OVER (PARTITION BY name ORDER BY observed_at DESC, seq DESC) AS version_rank
    FROM nodes
) WHERE version_rank = 1;

-- The names a DCGM `Hostname` may give a node (docs/accounting.md "Identity"): its name and its
-- kubernetes.io/hostname label, compared without case (`exact`), and failing those the first
-- DNS label of each (`gpu-1.ec2.internal` is `gpu-1`).
CREATE OR REPLACE VIEW node_keys AS
SELECT DISTINCT node, key, exact FROM (
    SELECT node, lower(node) AS key, true AS exact FROM nodes_latest
    UNION ALL SELECT node, lower(hostname_label), true FROM nodes_latest WHERE hostname_label IS NOT NULL
    UNION ALL SELECT node, split_part(lower(node), '.', 1), false FROM nodes_latest
    UNION ALL SELECT node, split_part(lower(hostname_label), '.', 1), false FROM nodes_latest WHERE hostname_label IS NOT NULL
);

-- The latest version of each Kueue object: LocalQueue, ClusterQueue, ResourceFlavor,
-- WorkloadPriorityClass (namespaced LocalQueues are keyed by namespace too).
CREATE OR REPLACE VIEW kueue_queues_latest AS
SELECT * FROM (
    SELECT *, ROW_NUMBER() OVER (PARTITION BY kind, namespace, name ORDER BY observed_at DESC, seq DESC) AS version_rank
    FROM kueue_queues
) WHERE version_rank = 1;

-- The ClusterQueue each LocalQueue feeds, for Workloads never admitted anywhere.
CREATE OR REPLACE VIEW local_queues_latest AS
SELECT namespace, name AS local_queue, cluster_queue FROM kueue_queues_latest WHERE kind = 'LocalQueue';

-- DRA (docs/accounting.md "DRA"): the pods each ResourceClaim was reserved for, device by device,
-- and when. A claim version holds from when it was observed until its next version (the first
-- from the beginning: a capture may hold only the claim as it was at the end, as `kubectl get`
-- writes it); a deleted claim holds nothing after its deletion. One row per version, allocated
-- device and reserved pod (claims may be reserved for other consumers; only pods hold GPUs).
CREATE OR REPLACE VIEW claim_reservations AS
SELECT c.namespace AS claim_namespace, c.name AS claim, c.driver, c.pool, c.device, c.share_id, c.consumed_capacity,
       c.device_class, c.reserved_name AS pod, c.reserved_uid AS pod_uid,
       CASE WHEN v.version_number = 1 THEN CAST(0 AS BIGINT) ELSE epoch_ms(v.observed_at) END AS valid_from_ms,
       epoch_ms(v.next_observed_at) AS valid_to_ms
FROM (
    SELECT namespace, name, observed_at, seq, event_type,
           ROW_NUMBER() OVER (PARTITION BY namespace, name ORDER BY observed_at, seq) AS version_number,
           LEAD(observed_at) OVER (PARTITION BY namespace, name ORDER BY observed_at, seq) AS next_observed_at
    FROM (SELECT DISTINCT namespace, name, observed_at, seq, event_type FROM resource_claims)
) v
JOIN resource_claims c ON c.namespace = v.namespace AND c.name = v.name AND c.observed_at = v.observed_at AND c.seq = v.seq
WHERE v.event_type <> 'DELETED' AND c.device IS NOT NULL AND c.reserved_resource = 'pods' AND c.reserved_name IS NOT NULL;

-- The GPUs of DRA claims, by the GPU's UUID where its ResourceSlice names one: the claim
-- allocations table (docs/accounting.md "DRA"), one row per claim version, device and pod.
CREATE OR REPLACE VIEW claim_allocations AS
SELECT r.claim_namespace, r.claim, r.device_class, r.driver, r.pool, r.device, d.uuid, d.parent_uuid, d.mig_profile,
       d.node_name, r.share_id, r.consumed_capacity, r.pod, r.pod_uid, r.valid_from_ms, r.valid_to_ms
FROM claim_reservations r
LEFT JOIN (
    SELECT * FROM (
        SELECT driver, pool, device, uuid, parent_uuid, mig_profile, node_name,
               ROW_NUMBER() OVER (PARTITION BY driver, pool, device ORDER BY observed_at DESC, seq DESC) AS version_rank
        FROM resource_slices
        WHERE device IS NOT NULL AND event_type <> 'DELETED'
    ) WHERE version_rank = 1
) d ON d.driver = r.driver AND d.pool = r.pool AND d.device = r.device;
