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

-- One row per Workload (namespace, name), with the ClusterQueue that admitted it: Kueue clears
-- status.admission on eviction, so the latest version may not name it; any version that did counts
-- (a Workload moved between ClusterQueues reports the alphabetically last one).
CREATE OR REPLACE VIEW workloads_latest AS
SELECT namespace, name AS workload, uid, created_at, owner_kind, owner_name, owner_uid, queue_name,
       admitted_cluster_queue, labels, annotations, gpu_count, whole_gpu_count,
       CASE WHEN event_type = 'DELETED' THEN observed_at END AS deleted_at
FROM (
    SELECT l.*, a.admitted_cluster_queue
    FROM (SELECT namespace AS a_namespace, name AS a_name, MAX(cluster_queue) AS admitted_cluster_queue
          FROM workloads GROUP BY namespace, name) a
    JOIN (
        SELECT * FROM (
            SELECT w.*, ROW_NUMBER() OVER (PARTITION BY namespace, name ORDER BY observed_at DESC, seq DESC) AS version_rank
            FROM workloads w
        ) WHERE version_rank = 1
    ) l ON (l.namespace IS NOT DISTINCT FROM a.a_namespace) AND (l.name IS NOT DISTINCT FROM a.a_name)
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
