-- 80  Why runs failed: each failed or preempted segment, its cause, and what it wasted.
--
-- Cause: a hardware fault first (55_who_pays.sql: XID <code>, NodeNotReady, NodeDeleted);
-- else for a preempted segment, the reason of the Workload's eviction (Preempted,
-- InactiveWorkload, PodsReadyTimeout, ...) or the pod's disruption; for a failed one, the last
-- termination of its last pod (OOMKilled, Error) else the Workload or job reason. Beside it:
-- the exit code, XID errors DCGM reported on its GPUs, and the Kubernetes events about its pods
-- and nodes while it ran. Causes are ranked by wasted GPU-hours and cost, per month.
-- Costs are exact sums of the priced rows (DECIMAL(38, 6), 60_chargeback.sql); hours are summed
-- as integer GPU-nanoseconds and converted at the end.

-- Every run segment with its GPU time and cost (all outcomes), and the part of it lost
-- (failed and preempted time: the whole of a lost segment, a retried attempt's time otherwise).
CREATE OR REPLACE VIEW run_segments AS
SELECT r.namespace, r.run, r.workload, r.segment, r.team, r.outcome, r.segment_started AS started_at,
       r.segment_ended AS ended_at, r.pods, r.last_pod, r.last_pod_key, r.failed_attempts, r.last_failed_pod, r.last_failed_pod_key,
       COALESCE(h.gpu_hours, 0) AS gpu_hours, COALESCE(h.cost, 0) AS cost,
       COALESCE(h.lost_gpu_hours, 0) AS lost_gpu_hours, COALESCE(h.lost_cost, 0) AS lost_cost, h.xid_error, h.nodes
FROM (
    SELECT namespace, run, MIN(workload) AS workload, segment, MIN(team) AS team, MIN(outcome) AS outcome,
           MIN(segment_started) AS segment_started, MAX(segment_ended) AS segment_ended,
           COUNT(*) AS pods,
           -- The pod that started last (name breaks ties): its termination speaks for the segment.
           MAX(CASE WHEN last_rank = 1 THEN pod END) AS last_pod,
           MAX(CASE WHEN last_rank = 1 THEN pod_key END) AS last_pod_key,
           -- Pods that failed while their segment went on, and the last of them.
           SUM(CASE WHEN pod_failed AND outcome NOT IN ('failed', 'preempted') THEN 1 ELSE 0 END) AS failed_attempts,
           MAX(CASE WHEN last_failed_rank = 1 THEN pod END) AS last_failed_pod,
           MAX(CASE WHEN last_failed_rank = 1 THEN pod_key END) AS last_failed_pod_key
    FROM (
        -- Rank 1: the latest start (a pod without a start time never speaks), then the name.
        SELECT *,
               CASE WHEN pod_started IS NOT NULL THEN ROW_NUMBER() OVER (
                   PARTITION BY namespace, run, segment
                   ORDER BY pod_started IS NULL, pod_started DESC, pod DESC, pod_key DESC) END AS last_rank,
               CASE WHEN pod_failed AND pod_started IS NOT NULL THEN ROW_NUMBER() OVER (
                   PARTITION BY namespace, run, segment
                   ORDER BY COALESCE(pod_failed, false) AND pod_started IS NOT NULL DESC, pod_started DESC, pod DESC, pod_key DESC) END AS last_failed_rank
        FROM pod_runs
    ) ranked
    GROUP BY namespace, run, segment
) r
LEFT JOIN (
    SELECT namespace, run, segment, CAST(SUM(ns) AS DOUBLE) / 3600000000000.0 AS gpu_hours, SUM(cost) AS cost,
           CAST(SUM(CASE WHEN state IN ('failed', 'preempted') THEN ns ELSE 0 END) AS DOUBLE) / 3600000000000.0 AS lost_gpu_hours,
           SUM(CASE WHEN state IN ('failed', 'preempted') THEN cost ELSE 0 END) AS lost_cost,
           MAX(xid_error) AS xid_error,
           -- The nodes in name order, sorted within each segment's list (an ordered string_agg
           -- sorts the whole table first, and under a memory limit DataFusion 55 asked for 14.5 GB
           -- to sort a 256-GPU month's hours).
           array_to_string(array_sort(array_agg(DISTINCT node) FILTER (WHERE node IS NOT NULL)), ',') AS nodes
    FROM (SELECT *, CAST(gpu_ns AS DECIMAL(38, 0)) AS ns FROM priced_state_hours)
    WHERE run IS NOT NULL
    GROUP BY namespace, run, segment
) h ON h.namespace = r.namespace AND h.run = r.run AND h.segment = r.segment;

-- Each failed or preempted segment, and each segment that went on after failed attempts (outcome
-- `failed`: its attempts' time is failed time; the last failed pod's termination is the cause).
CREATE OR REPLACE VIEW run_failures AS
SELECT rs.namespace, rs.run, rs.workload, rs.segment, rs.team,
       CASE WHEN rs.outcome IN ('failed', 'preempted') THEN rs.outcome ELSE 'failed' END AS outcome,
       rs.started_at, rs.ended_at,
       CASE
           WHEN lp.fault IS NOT NULL THEN lp.fault
           WHEN rs.outcome = 'preempted' THEN COALESCE(ws.end_reason, p.disruption_reason, p.reason, 'Preempted')
           WHEN rs.outcome = 'failed' THEN COALESCE(NULLIF(p.last_termination_reason, 'Completed'), ws.end_reason, p.reason, 'Failed')
           ELSE COALESCE(NULLIF(p.last_termination_reason, 'Completed'), p.reason, 'Failed')
       END AS cause,
       p.last_exit_code AS exit_code, rs.xid_error, rs.lost_gpu_hours AS gpu_hours, rs.lost_cost AS cost, rs.nodes,
       ev.event_reasons, lp.paid_by
FROM run_segments rs
LEFT JOIN lost_segment_payers lp
       ON lp.namespace = rs.namespace AND lp.run = rs.run AND lp.segment = rs.segment
LEFT JOIN workload_segments ws
       ON ws.namespace = rs.namespace AND ws.workload = rs.workload AND ws.segment = rs.segment
-- The pod whose termination speaks: the last pod of a lost segment, the last failed one otherwise.
LEFT JOIN pods_latest p
       ON p.namespace = rs.namespace
      AND p.pod_key = CASE WHEN rs.outcome IN ('failed', 'preempted') THEN rs.last_pod_key ELSE rs.last_failed_pod_key END
LEFT JOIN (
    -- Warning events about the segment's pods (or its Workload) while it ran, by reason. The
    -- pod and Workload matches are two joins on the full name, not one join with an OR in it:
    -- that matched on the namespace alone and compared every pod with every event in it.
    SELECT namespace, run, segment, string_agg(DISTINCT reason, ',' ORDER BY reason) AS event_reasons
    FROM (
        SELECT r.namespace, r.run, r.segment, e.reason, e.first_seen, e.last_seen, r.segment_started, r.segment_ended
        FROM pod_runs r
        JOIN k8s_events e
          ON e.regarding_namespace = r.namespace AND e.regarding_kind = 'Pod' AND e.regarding_name = r.pod
        WHERE e.type = 'Warning'
        UNION ALL
        SELECT r.namespace, r.run, r.segment, e.reason, e.first_seen, e.last_seen, r.segment_started, r.segment_ended
        FROM pod_runs r
        JOIN k8s_events e
          ON e.regarding_namespace = r.namespace AND e.regarding_kind = 'Workload' AND e.regarding_name = r.workload
        WHERE e.type = 'Warning'
    )
    WHERE COALESCE(last_seen, first_seen) >= segment_started
      AND (segment_ended IS NULL OR COALESCE(first_seen, last_seen) <= segment_ended)
    GROUP BY namespace, run, segment
) ev ON ev.namespace = rs.namespace AND ev.run = rs.run AND ev.segment = rs.segment
WHERE rs.outcome IN ('failed', 'preempted') OR rs.failed_attempts > 0;

-- Events about the nodes a failed segment ran on (NodeNotReady, XID reports, ...).
CREATE OR REPLACE VIEW run_failure_node_events AS
SELECT f.namespace, f.run, f.segment, e.regarding_name AS node, e.reason, COUNT(*) AS events
FROM run_failures f
JOIN k8s_events e
  ON e.regarding_kind = 'Node' AND strpos(',' || f.nodes || ',', ',' || e.regarding_name || ',') > 0
WHERE COALESCE(e.last_seen, e.first_seen) >= f.started_at
  AND (f.ended_at IS NULL OR COALESCE(e.first_seen, e.last_seen) <= f.ended_at)
GROUP BY f.namespace, f.run, f.segment, e.regarding_name, e.reason;

-- Causes per month. A segment's wasted hours and cost count in the months they were spent (as in
-- the chargeback), so a month's causes add up to its failed and preempted hours and cost; a
-- segment with no GPU time counts once, in the month it ended.
CREATE OR REPLACE VIEW failure_causes AS
SELECT month, outcome, cause, COUNT(*) AS segments, CAST(SUM(ns) AS DOUBLE) / 3600000000000.0 AS gpu_hours, SUM(cost) AS cost
FROM (
    SELECT h.month, f.outcome, f.cause, h.ns, h.cost
    FROM run_failures f
    JOIN (SELECT namespace, run, segment, month, SUM(CAST(gpu_ns AS DECIMAL(38, 0))) AS ns, SUM(cost) AS cost
          FROM priced_state_hours WHERE run IS NOT NULL AND state IN ('failed', 'preempted')
          GROUP BY namespace, run, segment, month) h
      ON h.namespace = f.namespace AND h.run = f.run AND h.segment = f.segment
    UNION ALL
    SELECT to_char(COALESCE(ended_at, started_at), '%Y-%m') AS month, outcome, cause,
           CAST(0 AS DECIMAL(38, 0)) AS ns, CAST(0 AS DECIMAL(38, 6)) AS cost
    FROM run_failures WHERE gpu_hours = 0
)
GROUP BY month, outcome, cause;
