-- 68  Why GPUs were idle: the idle hours of each month by team, state and reason, and the
-- capacity that stood unallocated while GPU Workloads waited (docs/accounting.md "Why GPUs were idle",
-- "Stranded capacity"). The reasons come from 40_states.sql:
--   allocated_idle  startup (before the pod's first active observation on the GPU), stall (between
--                   active observations), teardown (after its last)
--   unallocated     cordoned (node unschedulable or not Ready), stranded (a GPU Workload waited
--                   for quota that could have used the node), no_demand
-- `cost` is the price-list cost of those hours (60_chargeback.sql), before the idle policy moves
-- any of it: it says what each reason burned, not who pays. Costs are exact sums of the priced
-- rows (DECIMAL(38, 6)); hours are summed as integer GPU-nanoseconds and converted at the end.

-- Idle hours and cost per month, team, state and reason; `rank` orders a month's rows by cost,
-- then hours (1 = the costliest).
CREATE OR REPLACE VIEW idle_reasons_monthly AS
SELECT month, team, state, reason, gpu_hours, cost,
       ROW_NUMBER() OVER (PARTITION BY month ORDER BY cost DESC, gpu_hours DESC, team, state, reason) AS rank
FROM (
    SELECT month, team, state, reason,
           CAST(SUM(CAST(gpu_ns AS DECIMAL(38, 0))) AS DOUBLE) / 3600000000000.0 AS gpu_hours, SUM(cost) AS cost
    FROM priced_state_hours
    WHERE state IN ('allocated_idle', 'unallocated')
    GROUP BY month, team, state, reason
);

-- Stranded capacity per month, node pool (the node label that priced the GPUs; null where no
-- label rule matched) and GPU model: the unallocated hours, how many of them were stranded or
-- cordoned, and the stranded hours' cost. Reported, never charged.
CREATE OR REPLACE VIEW stranded_monthly AS
SELECT month, pool, model_name,
       CAST(SUM(ns) AS DOUBLE) / 3600000000000.0 AS unallocated_gpu_hours,
       CAST(SUM(CASE WHEN reason = 'stranded' THEN ns ELSE 0 END) AS DOUBLE) / 3600000000000.0 AS stranded_gpu_hours,
       SUM(CASE WHEN reason = 'stranded' THEN cost ELSE 0 END) AS stranded_cost,
       CAST(SUM(CASE WHEN reason = 'cordoned' THEN ns ELSE 0 END) AS DOUBLE) / 3600000000000.0 AS cordoned_gpu_hours
FROM (SELECT *, CAST(gpu_ns AS DECIMAL(38, 0)) AS ns FROM priced_state_hours)
WHERE state = 'unallocated'
GROUP BY month, pool, model_name;
