-- 80  Why runs failed: each failed or preempted segment, its cause, and what it wasted.
--
-- Cause: for a preempted segment, the reason of the Workload's eviction (Preempted,
-- InactiveWorkload, PodsReadyTimeout, ...) or the pod's disruption; for a failed one, the last
-- termination of its last pod (OOMKilled, Error) else the Workload or job reason. Beside it:
-- the exit code, XID errors DCGM reported on its GPUs, and the Kubernetes events about its pods
-- and nodes while it ran. Causes are ranked by wasted GPU-hours and cost, per month.

-- Every run segment with its GPU time and cost (all outcomes).
CREATE OR REPLACE VIEW run_segments AS
SELECT r.namespace, r.run, r.workload, r.segment, r.team, r.outcome, r.segment_started AS started_at,
       r.segment_ended AS ended_at, r.pods, r.last_pod,
       COALESCE(h.gpu_hours, 0) AS gpu_hours, COALESCE(h.cost, 0) AS cost, h.xid_error, h.nodes
FROM (
    SELECT namespace, run, MIN(workload) AS workload, segment, MIN(team) AS team, MIN(outcome) AS outcome,
           MIN(segment_started) AS segment_started, MAX(segment_ended) AS segment_ended,
           COUNT(*) AS pods,
           -- The pod that started last (name breaks ties): its termination speaks for the segment.
           substr(MAX(to_char(pod_started, '%Y-%m-%dT%H:%M:%S') || ' ' || pod || ' ' || pod_key), 21) AS last_pod
    FROM pod_runs
    GROUP BY namespace, run, segment
) r
LEFT JOIN (
    SELECT namespace, run, segment, SUM(gpu_hours) AS gpu_hours, SUM(cost) AS cost,
           MAX(xid_error) AS xid_error, string_agg(DISTINCT node, ',') AS nodes
    FROM priced_state_hours
    WHERE run IS NOT NULL
    GROUP BY namespace, run, segment
) h ON h.namespace = r.namespace AND h.run = r.run AND h.segment = r.segment;

CREATE OR REPLACE VIEW run_failures AS
SELECT rs.namespace, rs.run, rs.workload, rs.segment, rs.team, rs.outcome, rs.started_at, rs.ended_at,
       CASE
           WHEN rs.outcome = 'preempted' THEN COALESCE(ws.end_reason, p.disruption_reason, p.reason, 'Preempted')
           ELSE COALESCE(NULLIF(p.last_termination_reason, 'Completed'), ws.end_reason, p.reason, 'Failed')
       END AS cause,
       p.last_exit_code AS exit_code, rs.xid_error, rs.gpu_hours, rs.cost, rs.nodes,
       ev.event_reasons
FROM run_segments rs
LEFT JOIN workload_segments ws
       ON ws.namespace = rs.namespace AND ws.workload = rs.workload AND ws.segment = rs.segment
LEFT JOIN pods_latest p
       ON p.namespace = rs.namespace AND p.pod_key = split_part(rs.last_pod, ' ', 2)
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
WHERE rs.outcome IN ('failed', 'preempted');

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
SELECT month, outcome, cause, COUNT(*) AS segments, SUM(gpu_hours) AS gpu_hours, SUM(cost) AS cost
FROM (
    SELECT h.month, f.outcome, f.cause, h.gpu_hours, h.cost
    FROM run_failures f
    JOIN (SELECT namespace, run, segment, month, SUM(gpu_hours) AS gpu_hours, SUM(cost) AS cost
          FROM priced_state_hours WHERE run IS NOT NULL
          GROUP BY namespace, run, segment, month) h
      ON h.namespace = f.namespace AND h.run = f.run AND h.segment = f.segment
    UNION ALL
    SELECT to_char(COALESCE(ended_at, started_at), '%Y-%m') AS month, outcome, cause, 0.0 AS gpu_hours, 0.0 AS cost
    FROM run_failures WHERE gpu_hours = 0
)
GROUP BY month, outcome, cause;
