-- 58  Quota: who owns each ClusterQueue's nominal GPU quota, how much of it its Workloads used,
-- and how much stood unused while GPUs of its flavors were unallocated.
--
-- A ClusterQueue's owner is the team its `team` label names (the key is [accounting]
-- team_label), else its [[quota.owners]] entry, else `platform`. Per UTC hour, ClusterQueue and
-- GPU flavor (a ResourceFlavor its resource groups covering nvidia.com/gpu list), in quota units
-- (what nominalQuota counts: a time-sliced GPU advertises several nvidia.com/gpu) x time:
--
--   nominal   nominalQuota of nvidia.com/gpu for the flavor x the part of the hour the data covers
--             (each version of the ClusterQueue from when it was observed to its next version)
--   used      the nvidia.com/gpu its admitted Workloads use on the flavor (resourceUsage of their
--             podSetAssignments), from admission until the run segment ends (finished, evicted,
--             deleted; still running: the end of the data)
--   borrowed  max(0, used - nominal)
--   unused    max(0, nominal - used)
--
-- Quota units become GPU time at the flavor's ratio of physical GPUs (the GPUs DCGM reports on
-- its nodes) to advertised units (the nodes' nvidia.com/gpu capacity). For quota, each node
-- counts for one flavor: the one with the most nodeLabels, then the smallest name.
--
-- The `quota` idle policy (60_chargeback.sql): in each hour, the unallocated cost of a flavor's
-- nodes goes to the ClusterQueues with unused quota on it, each in proportion to its unused GPU
-- time and never for more than that: weight = unused GPU time, and the whole is the larger of
-- the weights' sum and the unallocated time; what the weights leave is the platform's.
-- Unallocated time on nodes no GPU flavor selects stays the platform's. Money moves; the hours
-- stay `unallocated`, the platform's. queries/tests/quota.slt works a day by hand.
--
-- Durations are integer nanoseconds (units x ns for quota); hours are keyed by their start in
-- ms since the epoch (`hour_ms`).

-- Each ClusterQueue's owner team.
CREATE OR REPLACE VIEW quota_queue_owners AS
SELECT q.name AS cluster_queue,
       COALESCE(NULLIF(label(q.labels, s.team_label), ''), o.team, 'platform') AS team
FROM settings s
CROSS JOIN kueue_queues_latest q
LEFT JOIN quota_owners o ON o.cluster_queue = q.name
WHERE q.kind = 'ClusterQueue';

-- The hours the data covers, each cut to the part of it inside the data's extent.
CREATE OR REPLACE VIEW quota_hours AS
SELECT h.hour_number * 3600000 AS hour_ms,
       GREATEST(h.hour_number * 3600000, e.first_ms) AS from_ms,
       LEAST(h.hour_number * 3600000 + 3600000, e.last_ms) AS to_ms
FROM calendar_hours h
CROSS JOIN (SELECT MIN(first_ms) AS first_ms, MAX(last_ms) AS last_ms FROM observed_extent) e
WHERE h.hour_number * 3600000 < e.last_ms AND h.hour_number * 3600000 + 3600000 > e.first_ms;

-- Each version of a ClusterQueue's GPU quota per flavor, from when it was observed until its
-- next version (a deleted ClusterQueue has none after): its nominalQuota of nvidia.com/gpu,
-- plus that of each name Kueue's deviceClassMappings count GPU devices as (`gpu_resource_names`).
CREATE OR REPLACE VIEW quota_nominal_windows AS
WITH versions AS (
    SELECT cluster_queue, gpu_nominal, gpu_flavors, nominal_by_resource, flavors_by_resource, from_ms, to_ms
    FROM (
        SELECT name AS cluster_queue, gpu_nominal, gpu_flavors, nominal_by_resource, flavors_by_resource, event_type,
               epoch_ms(observed_at) AS from_ms,
               COALESCE(LEAD(epoch_ms(observed_at)) OVER (PARTITION BY name ORDER BY observed_at, seq),
                        9223372036854775807) AS to_ms
        FROM kueue_queues
        WHERE kind = 'ClusterQueue'
    )
    WHERE event_type <> 'DELETED' AND to_ms > from_ms
),
quotas AS (
    -- Each version once per GPU resource name: nvidia.com/gpu (the null row: `gpu_flavors`,
    -- `gpu_nominal`) and each mapped name (read in one pass: see cluster_queue_gpu_flavors).
    SELECT cluster_queue, flavor, from_ms, to_ms,
           CAST(CASE WHEN resource IS NULL THEN label(gpu_nominal, flavor)
                     ELSE label(nominal_by_resource, flavor || ' ' || resource) END AS DECIMAL(38, 0)) AS nominal
    FROM (
        SELECT v.cluster_queue, v.gpu_nominal, v.nominal_by_resource, v.from_ms, v.to_ms, r.resource,
               unnest(string_to_array(CASE WHEN r.resource IS NULL THEN v.gpu_flavors
                                           ELSE label(v.flavors_by_resource, r.resource) END, ',')) AS flavor
        FROM (SELECT resource FROM gpu_resource_names UNION ALL SELECT CAST(NULL AS VARCHAR)) r
        CROSS JOIN versions v
        WHERE CASE WHEN r.resource IS NULL THEN v.gpu_flavors ELSE label(v.flavors_by_resource, r.resource) END IS NOT NULL
    )
)
SELECT cluster_queue, flavor, SUM(nominal) AS nominal, from_ms, to_ms
FROM quotas
WHERE nominal IS NOT NULL
GROUP BY cluster_queue, flavor, from_ms, to_ms;

-- The GPU quota each admitted Workload uses per flavor (its latest version that says), in the
-- ClusterQueue that admitted it, over each of its run segments: nvidia.com/gpu and the mapped
-- GPU names alike.
CREATE OR REPLACE VIEW quota_used_windows AS
WITH usage AS (
    SELECT namespace, name, gpu_usage, usage_by_resource FROM (
        SELECT namespace, name, gpu_usage, usage_by_resource,
               ROW_NUMBER() OVER (PARTITION BY namespace, name ORDER BY observed_at DESC, seq DESC) AS version_rank
        FROM workloads WHERE gpu_usage IS NOT NULL OR usage_by_resource IS NOT NULL
    ) WHERE version_rank = 1
),
units AS (
    -- Per flavor and GPU resource the ClusterQueue offers from it (cluster_queue_gpu_flavors).
    SELECT w.namespace, w.workload, f.cluster_queue, f.flavor,
           CAST(CASE WHEN f.resource = 'nvidia.com/gpu' THEN label(u.gpu_usage, f.flavor)
                     ELSE label(u.usage_by_resource, f.flavor || ' ' || f.resource) END AS DECIMAL(38, 0)) AS units
    FROM usage u
    JOIN workloads_latest w ON w.namespace = u.namespace AND w.workload = u.name
    JOIN cluster_queue_gpu_flavors f ON f.cluster_queue = w.admitted_cluster_queue
)
SELECT x.cluster_queue, x.flavor, SUM(x.units) AS units,
       epoch_ms(s.admitted_at) AS from_ms, COALESCE(epoch_ms(s.ended_at), 9223372036854775807) AS to_ms
FROM workload_segments s
JOIN units x ON x.namespace = s.namespace AND x.workload = s.workload
WHERE s.admitted_at IS NOT NULL AND x.units IS NOT NULL
GROUP BY x.cluster_queue, x.flavor, s.namespace, s.workload, s.admitted_at, s.ended_at;

-- Nominal and used quota per hour, ClusterQueue and flavor (units x ns).
CREATE OR REPLACE VIEW quota_queue_hours AS
WITH nominal AS (
    SELECT h.hour_ms, n.cluster_queue, n.flavor,
           SUM(n.nominal * (LEAST(h.to_ms, n.to_ms) - GREATEST(h.from_ms, n.from_ms)) * 1000000) AS ns
    FROM quota_hours h JOIN quota_nominal_windows n ON n.from_ms < h.to_ms AND n.to_ms > h.from_ms
    GROUP BY h.hour_ms, n.cluster_queue, n.flavor
),
used AS (
    SELECT h.hour_ms, u.cluster_queue, u.flavor,
           SUM(u.units * (LEAST(h.to_ms, u.to_ms) - GREATEST(h.from_ms, u.from_ms)) * 1000000) AS ns
    FROM quota_hours h JOIN quota_used_windows u ON u.from_ms < h.to_ms AND u.to_ms > h.from_ms
    GROUP BY h.hour_ms, u.cluster_queue, u.flavor
)
SELECT COALESCE(n.hour_ms, u.hour_ms) AS hour_ms, COALESCE(n.cluster_queue, u.cluster_queue) AS cluster_queue,
       COALESCE(n.flavor, u.flavor) AS flavor,
       COALESCE(n.ns, CAST(0 AS DECIMAL(38, 0))) AS nominal_ns, COALESCE(u.ns, CAST(0 AS DECIMAL(38, 0))) AS used_ns
FROM nominal n
FULL OUTER JOIN used u ON u.hour_ms = n.hour_ms AND u.cluster_queue = n.cluster_queue AND u.flavor = n.flavor;

-- The one GPU flavor each node counts for: of the flavors some ClusterQueue offers GPUs from
-- that select it, the one with the most nodeLabels (counted as the `":"` separators of the
-- canonical label object), then the smallest name.
CREATE OR REPLACE VIEW quota_flavor_nodes AS
SELECT flavor, node FROM (
    SELECT f.flavor, f.node,
           ROW_NUMBER() OVER (PARTITION BY f.node
                              ORDER BY length(COALESCE(r.node_labels, '')) - length(replace(COALESCE(r.node_labels, ''), '":"', '')) DESC,
                                       f.flavor) AS flavor_rank
    FROM flavor_nodes f
    JOIN (SELECT name, node_labels FROM kueue_queues_latest WHERE kind = 'ResourceFlavor') r ON r.name = f.flavor
    WHERE f.flavor IN (SELECT flavor FROM cluster_queue_gpu_flavors)
) WHERE flavor_rank = 1;

-- Per flavor, the physical GPUs of its nodes (distinct GPUs DCGM reported) and the quota units
-- they advertise (nvidia.com/gpu capacity; where a node reports none, one per GPU).
CREATE OR REPLACE VIEW quota_flavor_units AS
SELECT q.flavor, SUM(g.gpus) AS gpus, SUM(COALESCE(NULLIF(n.gpu_capacity, 0), g.gpus)) AS units
FROM quota_flavor_nodes q
JOIN (SELECT node, COUNT(DISTINCT uuid) AS gpus FROM gpu_state_hours WHERE uuid IS NOT NULL GROUP BY node) g ON g.node = q.node
LEFT JOIN nodes_latest n ON n.node = q.node
GROUP BY q.flavor;

-- Unallocated GPU time per hour and flavor (null: nodes no GPU flavor selects).
CREATE OR REPLACE VIEW quota_unallocated_hours AS
SELECT CAST(date_part('epoch', to_timestamp(h.hour)) AS BIGINT) * 1000 AS hour_ms, q.flavor,
       SUM(CAST(h.gpu_ns AS DECIMAL(38, 0))) AS unallocated_ns
FROM gpu_state_hours h
LEFT JOIN quota_flavor_nodes q ON q.node = h.node
WHERE h.state = 'unallocated'
GROUP BY CAST(date_part('epoch', to_timestamp(h.hour)) AS BIGINT) * 1000, q.flavor;

-- What the `quota` policy splits each hour's unallocated cost of a flavor by: one row per
-- ClusterQueue with unused quota there (weight: its unused units x ns x the flavor's GPUs, so
-- that weight / units is its unused GPU time), and the platform's rest (cluster_queue null).
-- `whole` is the larger of the weights' sum and the unallocated time (x units): no queue pays
-- for more time than it left unused.
CREATE OR REPLACE VIEW quota_weights AS
WITH unused AS (
    SELECT q.hour_ms, q.cluster_queue, q.flavor, (q.nominal_ns - q.used_ns) * u.gpus AS weight
    FROM quota_queue_hours q JOIN quota_flavor_units u ON u.flavor = q.flavor
    WHERE q.nominal_ns > q.used_ns
),
totals AS (
    SELECT a.hour_ms, a.flavor, a.unallocated_ns,
           GREATEST(COALESCE(SUM(w.weight), 0), a.unallocated_ns * COALESCE(MAX(u.units), 1)) AS whole,
           COALESCE(SUM(w.weight), 0) AS weights
    FROM quota_unallocated_hours a
    LEFT JOIN quota_flavor_units u ON u.flavor = a.flavor
    LEFT JOIN unused w ON w.hour_ms = a.hour_ms AND w.flavor = a.flavor
    WHERE a.unallocated_ns > 0
    GROUP BY a.hour_ms, a.flavor, a.unallocated_ns
)
SELECT t.hour_ms, t.flavor, w.cluster_queue, w.weight, t.whole
FROM totals t JOIN unused w ON w.hour_ms = t.hour_ms AND w.flavor = t.flavor
UNION ALL
SELECT hour_ms, flavor, CAST(NULL AS VARCHAR) AS cluster_queue, whole - weights AS weight, whole
FROM totals WHERE whole > weights;

-- Per month, ClusterQueue, owner and flavor: the quota as GPU-hours (units x the flavor's GPUs
-- per unit), summed per hour first (borrowed and unused are per hour).
CREATE OR REPLACE VIEW quota_queue_months AS
SELECT to_char(to_timestamp_millis(q.hour_ms), '%Y-%m') AS month, q.cluster_queue, COALESCE(o.team, 'platform') AS team, q.flavor,
       SUM(q.nominal_ns) AS nominal_ns,
       SUM(q.used_ns) AS used_ns,
       SUM(GREATEST(q.used_ns - q.nominal_ns, 0)) AS borrowed_ns,
       SUM(GREATEST(q.nominal_ns - q.used_ns, 0)) AS unused_ns,
       MAX(COALESCE(u.gpus, 1)) AS gpus, MAX(COALESCE(u.units, 1)) AS units
FROM quota_queue_hours q
LEFT JOIN quota_queue_owners o ON o.cluster_queue = q.cluster_queue
LEFT JOIN quota_flavor_units u ON u.flavor = q.flavor
GROUP BY to_char(to_timestamp_millis(q.hour_ms), '%Y-%m'), q.cluster_queue, COALESCE(o.team, 'platform'), q.flavor;
