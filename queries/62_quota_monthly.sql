-- 62  Quota per month: what each ClusterQueue's owner held in nominal GPU quota, how much of it
-- its Workloads used, borrowed beyond it and left unused (58_quota.sql), and what the unused
-- part cost: the unallocated cost the `quota` idle policy charges for it (60_chargeback.sql).
-- GPU-hours are quota units x time x the flavor's physical GPUs per advertised unit, summed as
-- nanoseconds and converted once; borrowed and unused are taken per hour before summing.
-- `unused_cost` is computed whatever the idle policy: under `platform` and `share` the platform
-- or every team pays it instead.
CREATE OR REPLACE VIEW quota_monthly AS
SELECT m.month, m.cluster_queue, m.team, m.flavor,
       CAST(m.nominal_ns * m.gpus AS DOUBLE) / CAST(m.units AS DOUBLE) / 3600000000000.0 AS nominal_gpu_hours,
       CAST(m.used_ns * m.gpus AS DOUBLE) / CAST(m.units AS DOUBLE) / 3600000000000.0 AS used_gpu_hours,
       CAST(m.borrowed_ns * m.gpus AS DOUBLE) / CAST(m.units AS DOUBLE) / 3600000000000.0 AS borrowed_gpu_hours,
       CAST(m.unused_ns * m.gpus AS DOUBLE) / CAST(m.units AS DOUBLE) / 3600000000000.0 AS unused_gpu_hours,
       COALESCE(c.amount, CAST(0 AS DECIMAL(38, 6))) AS unused_cost
FROM quota_queue_months m
LEFT JOIN (SELECT month, cluster_queue, flavor, SUM(amount) AS amount
           FROM quota_cost_parts WHERE cluster_queue IS NOT NULL
           GROUP BY month, cluster_queue, flavor) c
       ON c.month = m.month AND c.cluster_queue = m.cluster_queue AND c.flavor = m.flavor;
