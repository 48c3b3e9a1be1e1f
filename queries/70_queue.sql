-- 70  Queue waits: how long Workloads waited for admission.
--
-- Per Workload: the first wait is its first admission (Admitted, else QuotaReserved where the
-- Workload has no Admitted condition: 20_runs.sql) minus its creation; after each eviction, the
-- next admission minus the eviction (else the requeue, where the eviction's time was not kept).
-- A wait counts in the month of its admission. Per team and ClusterQueue: admissions, p50, p95 and max wait (nearest-rank
-- percentiles: the smallest wait at or above that fraction of the sorted waits), and the
-- evictions with their reasons.

CREATE OR REPLACE VIEW queue_waits AS
SELECT a.namespace, a.workload, a.segment, a.admitted_at, q.queued_at,
       COALESCE(wt.team, NULLIF(label(w.labels, s.team_label), ''), n.team_label, a.namespace) AS team,
       COALESCE(w.admitted_cluster_queue, lq.cluster_queue, '') AS cluster_queue,
       (epoch_ms(a.admitted_at) - epoch_ms(q.queued_at)) / 1000.0 AS wait_seconds
FROM settings s
CROSS JOIN workload_admissions a
JOIN workloads_latest w ON w.namespace = a.namespace AND w.workload = a.workload
JOIN (
    -- When each segment's wait began.
    SELECT a.namespace, a.workload, a.segment,
           CASE WHEN a.segment = 1 THEN w.created_at
                ELSE COALESCE(MAX(CASE WHEN t.type = 'Evicted' THEN t.at END),
                              MAX(CASE WHEN t.type = 'Requeued' THEN t.at END), prev.admitted_at) END AS queued_at
    FROM workload_admissions a
    JOIN workloads_latest w ON w.namespace = a.namespace AND w.workload = a.workload
    LEFT JOIN workload_admissions prev
           ON prev.namespace = a.namespace AND prev.workload = a.workload AND prev.segment = a.segment - 1
    LEFT JOIN workload_transitions t
           ON t.namespace = a.namespace AND t.workload = a.workload AND t.status = 'True'
          AND t.type IN ('Requeued', 'Evicted') AND t.at >= prev.admitted_at AND t.at <= a.admitted_at
    GROUP BY a.namespace, a.workload, a.segment, w.created_at, prev.admitted_at
) q ON q.namespace = a.namespace AND q.workload = a.workload AND q.segment = a.segment
LEFT JOIN (SELECT namespace, workload, MIN(team) AS team FROM pod_runs
           WHERE workload IS NOT NULL GROUP BY namespace, workload) wt
       ON wt.namespace = a.namespace AND wt.workload = a.workload
LEFT JOIN namespaces_latest n ON n.namespace = a.namespace
LEFT JOIN local_queues_latest lq ON lq.namespace = a.namespace AND lq.local_queue = w.queue_name
WHERE q.queued_at IS NOT NULL;

-- Evictions per Workload and reason.
CREATE OR REPLACE VIEW workload_evictions AS
SELECT namespace, workload, COALESCE(reason, 'unknown') AS reason, COUNT(*) AS evictions
FROM workload_transitions
WHERE type = 'Evicted' AND status = 'True'
GROUP BY namespace, workload, COALESCE(reason, 'unknown');

-- Evictions per team and ClusterQueue, with their reasons (`Preempted x3, InactiveWorkload x1`).
CREATE OR REPLACE VIEW queue_evictions AS
SELECT team, cluster_queue, SUM(evictions) AS evictions,
       string_agg(reason || ' x' || CAST(evictions AS VARCHAR), ', ' ORDER BY reason) AS eviction_reasons
FROM (
    SELECT q.team, q.cluster_queue, e.reason, SUM(e.evictions) AS evictions
    FROM workload_evictions e
    JOIN (SELECT DISTINCT namespace, workload, team, cluster_queue FROM queue_waits) q
      ON q.namespace = e.namespace AND q.workload = e.workload
    GROUP BY q.team, q.cluster_queue, e.reason
)
GROUP BY team, cluster_queue;

-- Waits per team and ClusterQueue over a period: each month of admission, and 'all' for the
-- whole data.
CREATE OR REPLACE VIEW queue_wait_periods AS
SELECT period, team, cluster_queue, COUNT(*) AS admissions,
       MIN(CASE WHEN rn >= CEIL(0.50 * n) THEN wait_seconds END) AS p50_seconds,
       MIN(CASE WHEN rn >= CEIL(0.95 * n) THEN wait_seconds END) AS p95_seconds,
       MAX(wait_seconds) AS max_seconds
FROM (
    SELECT period, team, cluster_queue, wait_seconds,
           ROW_NUMBER() OVER (PARTITION BY period, team, cluster_queue ORDER BY wait_seconds) AS rn,
           COUNT(*) OVER (PARTITION BY period, team, cluster_queue) AS n
    FROM (
        SELECT to_char(admitted_at, '%Y-%m') AS period, team, cluster_queue, wait_seconds FROM queue_waits
        UNION ALL
        SELECT 'all' AS period, team, cluster_queue, wait_seconds FROM queue_waits
    )
)
GROUP BY period, team, cluster_queue;

-- The whole data's waits, with the evictions.
CREATE OR REPLACE VIEW queue_wait_summary AS
SELECT w.team, w.cluster_queue, w.admissions, w.p50_seconds, w.p95_seconds, w.max_seconds,
       COALESCE(e.evictions, 0) AS evictions, COALESCE(e.eviction_reasons, '') AS eviction_reasons
FROM queue_wait_periods w
LEFT JOIN queue_evictions e ON e.team = w.team AND e.cluster_queue = w.cluster_queue
WHERE w.period = 'all';

-- Each month's waits (by month of admission); evictions as in the summary (the whole data).
CREATE OR REPLACE VIEW queue_wait_monthly AS
SELECT w.period AS month, w.team, w.cluster_queue, w.admissions, w.p50_seconds, w.p95_seconds, w.max_seconds,
       COALESCE(e.evictions, 0) AS evictions, COALESCE(e.eviction_reasons, '') AS eviction_reasons
FROM queue_wait_periods w
LEFT JOIN queue_evictions e ON e.team = w.team AND e.cluster_queue = w.cluster_queue
WHERE w.period <> 'all';
