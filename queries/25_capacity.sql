-- 25  Capacity: when a node could take no pod, and when GPU Workloads waited for quota.
--
-- Both explain unallocated GPU time (40_states.sql; docs/accounting.md "Why GPUs were idle", "Stranded
-- capacity"). Unallocated time is, the first that holds at the observation's time:
--   cordoned   its node was unschedulable (`kubectl cordon`, a drain) or its Ready condition
--              was not True;
--   stranded   a Workload asking for nvidia.com/gpu was waiting for quota in a ClusterQueue one
--              of whose GPU ResourceFlavors selects the node (every nodeLabels entry of the
--              flavor is a label of the node; a flavor without nodeLabels selects every node);
--   no_demand  neither.
--
-- Times are ms since the epoch; windows are [from_ms, to_ms), and a window still open at the
-- end of the data ends at 9223372036854775807 (the largest BIGINT).

-- When each node could take no pod: a node version's cordon and readiness hold from when it was
-- observed until the node's next version. A version that does not report readiness (ready null)
-- counts as Ready.
CREATE OR REPLACE VIEW node_unavailable AS
SELECT node, from_ms, to_ms
FROM (
    SELECT name AS node, epoch_ms(observed_at) AS from_ms,
           COALESCE(LEAD(epoch_ms(observed_at)) OVER (PARTITION BY name ORDER BY observed_at, seq),
                    9223372036854775807) AS to_ms,
           unschedulable OR COALESCE(NOT ready, false) AS unavailable
    FROM nodes
)
WHERE unavailable AND to_ms > from_ms;

-- When each Workload began to wait for quota: at its creation, and at each eviction that put it
-- back in its queue. An eviction that deactivated it (InactiveWorkload, Deactivated...) ended
-- its run; it waits for nothing.
CREATE OR REPLACE VIEW workload_wait_starts AS
SELECT namespace, workload, created_at AS queued_at FROM workloads_latest WHERE created_at IS NOT NULL
UNION
SELECT namespace, workload, at AS queued_at
FROM workload_transitions
WHERE type = 'Evicted' AND status = 'True'
  AND NOT (COALESCE(reason, '') = 'InactiveWorkload' OR COALESCE(reason, '') LIKE 'Deactivated%');

-- Each wait of each Workload, until it held quota again (QuotaReserved or Admitted turning True),
-- finished or was deleted; open while it still waited at the end of the data. `cluster_queue`
-- is the one its LocalQueue feeds (where it waits), else the one that admitted it; `whole_gpus`
-- the whole GPUs (nvidia.com/gpu) it asks for: a Workload asking only for MIG slices cannot use
-- an unallocated whole GPU, so its wait strands nothing.
CREATE OR REPLACE VIEW workload_waits AS
SELECT s.namespace, s.workload,
       -- A store ingested before whole_gpu_count existed has only gpu_count (MIG slices included).
       COALESCE(w.whole_gpu_count, w.gpu_count) AS whole_gpus,
       COALESCE(lq.cluster_queue, w.admitted_cluster_queue) AS cluster_queue,
       epoch_ms(s.queued_at) AS from_ms,
       COALESCE(epoch_ms(LEAST(MIN(e.at), w.deleted_at)), 9223372036854775807) AS to_ms
FROM workload_wait_starts s
JOIN workloads_latest w ON w.namespace = s.namespace AND w.workload = s.workload
LEFT JOIN local_queues_latest lq ON lq.namespace = w.namespace AND lq.local_queue = w.queue_name
LEFT JOIN workload_transitions e
       ON e.namespace = s.namespace AND e.workload = s.workload AND e.status = 'True'
      AND e.type IN ('QuotaReserved', 'Admitted', 'Finished') AND e.at >= s.queued_at
GROUP BY s.namespace, s.workload, COALESCE(w.whole_gpu_count, w.gpu_count), COALESCE(lq.cluster_queue, w.admitted_cluster_queue),
         s.queued_at, w.deleted_at;

-- The ResourceFlavors each ClusterQueue offers GPUs from (its resource groups covering
-- nvidia.com/gpu; `gpu_flavors` is their names, comma-separated, or covering a name Kueue's
-- deviceClassMappings count GPU devices as: `gpu_resource_names`), from its latest version,
-- with the resource each offers.
CREATE OR REPLACE VIEW cluster_queue_gpu_flavors AS
SELECT DISTINCT cluster_queue, flavor, resource
FROM (
    -- Each ClusterQueue once per GPU resource name: nvidia.com/gpu (the null row, `gpu_flavors`)
    -- and each mapped name. (kueue_queues_latest is read once: a plan that read it twice, once
    -- per resource, was refused by Ballista's executors for the ordering of its window.)
    SELECT q.name AS cluster_queue, COALESCE(r.mapped, 'nvidia.com/gpu') AS resource,
           unnest(string_to_array(CASE WHEN r.mapped IS NULL THEN q.gpu_flavors ELSE label(q.flavors_by_resource, r.mapped) END, ',')) AS flavor
    FROM (SELECT resource AS mapped FROM gpu_resource_names UNION ALL SELECT CAST(NULL AS VARCHAR)) r
    CROSS JOIN kueue_queues_latest q
    WHERE q.kind = 'ClusterQueue'
      AND CASE WHEN r.mapped IS NULL THEN q.gpu_flavors ELSE label(q.flavors_by_resource, r.mapped) END IS NOT NULL
);

-- The nodes each ResourceFlavor selects: those carrying every one of its nodeLabels.
CREATE OR REPLACE VIEW flavor_nodes AS
SELECT f.name AS flavor, n.node
FROM kueue_queues_latest f
CROSS JOIN nodes_latest n
WHERE f.kind = 'ResourceFlavor' AND (f.node_labels IS NULL OR json_contains(n.labels, f.node_labels));

-- What the capture lacks: ClusterQueues GPU Workloads waited in, and GPU flavors a ClusterQueue
-- names. They select no node, so waits behind them strand nothing; the ledger warns about each.
CREATE OR REPLACE VIEW missing_queue_objects AS
SELECT DISTINCT 'ClusterQueue' AS kind, w.cluster_queue AS name
FROM workload_waits w
LEFT JOIN (SELECT name FROM kueue_queues_latest WHERE kind = 'ClusterQueue') q ON q.name = w.cluster_queue
WHERE w.whole_gpus > 0 AND w.cluster_queue IS NOT NULL AND q.name IS NULL
UNION ALL
SELECT DISTINCT 'ResourceFlavor' AS kind, c.flavor AS name
FROM cluster_queue_gpu_flavors c
LEFT JOIN (SELECT name FROM kueue_queues_latest WHERE kind = 'ResourceFlavor') f ON f.name = c.flavor
WHERE f.name IS NULL;

-- Per node, when some Workload asking for GPUs waited in a ClusterQueue that could have placed
-- it there: the waits of all such Workloads, merged where they overlap or touch (an island
-- starts where a wait begins after every earlier one ended), so that each instant is in at most
-- one window however many Workloads waited.
CREATE OR REPLACE VIEW stranding_windows AS
SELECT node, MIN(from_ms) AS from_ms, MAX(to_ms) AS to_ms
FROM (
    SELECT node, from_ms, to_ms,
           SUM(CASE WHEN ended_before IS NULL OR from_ms > ended_before THEN 1 ELSE 0 END)
               OVER (PARTITION BY node ORDER BY from_ms, to_ms ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW) AS island
    FROM (
        SELECT node, from_ms, to_ms,
               MAX(to_ms) OVER (PARTITION BY node ORDER BY from_ms, to_ms
                                ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS ended_before
        FROM (
            SELECT DISTINCT f.node, w.from_ms, w.to_ms
            FROM workload_waits w
            JOIN cluster_queue_gpu_flavors c ON c.cluster_queue = w.cluster_queue
            JOIN flavor_nodes f ON f.flavor = c.flavor
            WHERE w.whole_gpus > 0 AND w.to_ms > w.from_ms
        )
    )
)
GROUP BY node, island;
