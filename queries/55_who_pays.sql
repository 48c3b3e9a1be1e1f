-- 55  Who pays for lost runs. A failed or preempted run segment is the platform's fault when the
-- hardware under it failed; the platform then pays for the segment's GPU time. The policy moves
-- money, never hours: the time stays the run team's `failed` or `preempted` time, and the
-- chargeback (60) shows how much of it the platform paid for.
--
-- The platform's fault, the first found of:
--   XID <code>    a GPU the segment held reported an XID error whose code is in `hardware_xids`
--                 (ECC, row remapping, NVLink, fallen off the bus, GSP), during the segment or
--                 within max_gap after its end: DCGM's XID field changing to the code
--                 (32_spans.sql), or a Kubernetes event about the node quoting the driver's
--                 "Xid (PCI:...): <code>" line;
--   NodeNotReady  a node the segment ran on was not Ready during its last 10 minutes (a node
--                 version with Ready not True, or a NodeNotReady event);
--   NodeDeleted   a node the segment ran on was deleted while it ran.
-- Who pays: the platform for a fault when `hardware_failures` = 'platform' (the default), and
-- for every preemption when `preemptions` = 'platform' (default 'team'); else the run's team.
--
-- Inputs besides 20 and 40: `xid_errors` and `lost_segment_gpus` (gathered day by day),
-- `hardware_xids` (the configured codes), the node versions and events.

-- Each failed or preempted segment with the times it ran. A segment without an end (a Workload
-- that failed with no recorded time) is open-ended.
CREATE OR REPLACE VIEW lost_segments AS
SELECT namespace, run, segment, MIN(outcome) AS outcome,
       epoch_ms(MIN(segment_started)) AS started_ms, epoch_ms(MAX(segment_ended)) AS ended_ms
FROM pod_runs
WHERE outcome IN ('failed', 'preempted')
GROUP BY namespace, run, segment;

-- max_gap of each GPU per month: max_gap_factor x its scrape interval (MIG instances and pods
-- sharing the GPU have one interval; the longest counts), 30 s where the month has none.
CREATE OR REPLACE VIEW gpu_max_gaps AS
SELECT i.uuid, i.month, MAX(i.interval_ms) * MIN(s.max_gap_factor) AS max_gap_ms
FROM settings s CROSS JOIN scrape_intervals i
GROUP BY i.uuid, i.month;

-- The GPUs (uuid) and nodes each lost segment held, with the segment's times.
CREATE OR REPLACE VIEW lost_segment_held AS
SELECT l.namespace, l.run, l.segment, l.started_ms, l.ended_ms, g.node, g.uuid
FROM lost_segments l
JOIN lost_segment_gpus g ON g.namespace = l.namespace AND g.run = l.run AND g.segment = l.segment;

CREATE OR REPLACE VIEW lost_segment_nodes AS
SELECT DISTINCT namespace, run, segment, started_ms, ended_ms, node FROM lost_segment_held;

-- Events about nodes, with when they happened.
CREATE OR REPLACE VIEW node_events AS
SELECT regarding_name AS node, reason, message, epoch_ms(COALESCE(first_seen, last_seen, observed_at)) AS at_ms
FROM k8s_events
WHERE regarding_kind = 'Node';

-- Every fault found for a lost segment, with when it happened.
CREATE OR REPLACE VIEW lost_segment_fault_candidates AS
-- An XID error with a hardware code on a GPU the segment held, during it or within that GPU's
-- max_gap after its end: DCGM's XID field, or the driver's XID line in an event about the
-- GPU's node (a health monitor, node-problem-detector).
SELECT x.namespace, x.run, x.segment, 'XID ' || CAST(x.xid AS VARCHAR) AS fault, x.at_ms, 1 AS priority
FROM (
    SELECT g.namespace, g.run, g.segment, g.started_ms, g.ended_ms, g.uuid, e.xid, e.t AS at_ms
    FROM lost_segment_held g
    JOIN xid_errors e ON e.uuid = g.uuid
    UNION ALL
    SELECT g.namespace, g.run, g.segment, g.started_ms, g.ended_ms, g.uuid,
           -- (regexp_replace, not regexp_match: a cluster's executors lack the array functions.)
           TRY_CAST(regexp_replace(e.message, '(?s)^.*?[Xx]id(?: \([^)]*\))?:? *([0-9]+).*$', '\1') AS BIGINT),
           e.at_ms
    FROM lost_segment_held g
    JOIN node_events e ON e.node = g.node
    WHERE strpos(lower(e.message), 'xid') > 0
) x
JOIN hardware_xids h ON h.xid = x.xid
CROSS JOIN settings s
LEFT JOIN gpu_max_gaps mg ON mg.uuid = x.uuid AND mg.month = to_char(to_timestamp_millis(x.at_ms), '%Y-%m')
WHERE x.at_ms >= x.started_ms
  AND (x.ended_ms IS NULL OR x.at_ms <= x.ended_ms + COALESCE(mg.max_gap_ms, 30000.0 * s.max_gap_factor))
UNION ALL
-- A node version with Ready not True (False or Unknown) in force during the last 10 minutes.
SELECT g.namespace, g.run, g.segment, 'NodeNotReady', GREATEST(v.from_ms, g.ended_ms - 600000), 2
FROM lost_segment_nodes g
JOIN (
    SELECT name, ready, epoch_ms(observed_at) AS from_ms,
           epoch_ms(LEAD(observed_at) OVER (PARTITION BY name ORDER BY observed_at, seq)) AS to_ms
    FROM nodes
) v ON v.name = g.node
WHERE v.ready = false AND g.ended_ms IS NOT NULL
  AND v.from_ms <= g.ended_ms AND (v.to_ms IS NULL OR v.to_ms > g.ended_ms - 600000)
UNION ALL
-- A NodeNotReady event in the last 10 minutes.
SELECT g.namespace, g.run, g.segment, 'NodeNotReady', e.at_ms, 2
FROM lost_segment_nodes g
JOIN node_events e ON e.node = g.node AND e.reason = 'NodeNotReady'
WHERE g.ended_ms IS NOT NULL AND e.at_ms BETWEEN g.ended_ms - 600000 AND g.ended_ms
UNION ALL
-- The node deleted while the segment ran.
SELECT g.namespace, g.run, g.segment, 'NodeDeleted', epoch_ms(v.observed_at), 3
FROM lost_segment_nodes g
JOIN nodes v ON v.name = g.node AND v.event_type = 'DELETED'
WHERE epoch_ms(v.observed_at) >= g.started_ms AND (g.ended_ms IS NULL OR epoch_ms(v.observed_at) <= g.ended_ms);

-- Each lost segment, its fault (the first kind above, the earliest of that kind; null when the
-- hardware did not fail it) and who pays for its GPU time.
CREATE OR REPLACE VIEW lost_segment_payers AS
SELECT l.namespace, l.run, l.segment, l.outcome, f.fault,
       CASE WHEN f.fault IS NOT NULL AND s.hardware_failures = 'platform' THEN 'platform'
            WHEN l.outcome = 'preempted' AND s.preemptions = 'platform' THEN 'platform'
            ELSE 'team' END AS paid_by
FROM settings s
CROSS JOIN lost_segments l
LEFT JOIN (
    SELECT namespace, run, segment, fault
    FROM (
        SELECT *, ROW_NUMBER() OVER (PARTITION BY namespace, run, segment ORDER BY priority, at_ms, fault) AS fault_rank
        FROM lost_segment_fault_candidates
    ) WHERE fault_rank = 1
) f ON f.namespace = l.namespace AND f.run = l.run AND f.segment = l.segment;
