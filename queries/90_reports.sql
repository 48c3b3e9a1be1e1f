-- 90  What the month report, the HTTP API and /metrics read.
--
-- Every figure a report shows comes from these views or from the derived tables they read; the
-- Rust side filters by month (a bound parameter) and formats, nothing more. The views read only
-- derived tables (priced_state_hours, chargeback_monthly, accepted_units_monthly), so they run
-- the same in an accounting session and over a store's stored ledger (`gpuledger serve`).

-- GPU-hours and cost per month, team, state and GPU model: the grain of the FOCUS export and
-- the report's usage table. Lost time whose cost the platform pays (55) is its own row
-- (platform_paid), charged to the team `platform`. A team's accepted units go to its productive
-- rows in proportion to their GPU-hours, so that units per model add up to the team's units.
CREATE OR REPLACE VIEW report_usage AS
WITH usage AS (
    SELECT month, team, state, COALESCE(model_name, 'unknown') AS model_name,
           COALESCE(paid_by = 'platform', false) AS platform_paid,
           SUM(gpu_hours) AS gpu_hours,
           SUM(CASE WHEN provisional THEN gpu_hours ELSE 0 END) AS provisional_gpu_hours,
           SUM(cost) AS cost
    FROM priced_state_hours
    GROUP BY month, team, state, COALESCE(model_name, 'unknown'), COALESCE(paid_by = 'platform', false)
),
team_units AS (
    SELECT month, team, SUM(accepted_units) AS accepted_units
    FROM accepted_units_monthly GROUP BY month, team
),
team_productive AS (
    SELECT month, team, SUM(gpu_hours) AS gpu_hours
    FROM usage WHERE state = 'productive' GROUP BY month, team
)
SELECT u.month, u.team, u.state, u.model_name, u.gpu_hours, u.provisional_gpu_hours, u.cost,
       CASE WHEN u.state = 'productive' AND p.gpu_hours > 0
            THEN COALESCE(t.accepted_units, 0) * u.gpu_hours / p.gpu_hours
            ELSE 0.0 END AS accepted_units,
       u.platform_paid
FROM usage u
LEFT JOIN team_units t ON t.month = u.month AND t.team = u.team
LEFT JOIN team_productive p ON p.month = u.month AND p.team = u.team;

-- Months with GPU time, overheads or units, and their GPU-hours in every state (the busiest
-- month is the default of `report` and the API).
CREATE OR REPLACE VIEW report_months AS
SELECT month,
       SUM(productive_gpu_hours + allocated_idle_gpu_hours + failed_gpu_hours + preempted_gpu_hours + unallocated_gpu_hours) AS gpu_hours
FROM chargeback_monthly
GROUP BY month;

-- The stored ledger as Prometheus gauges (`gpuledger serve`'s /metrics), long form: one row per
-- sample, the gauge's name, its month and team, and at most one more label (the state or cost
-- component) beside them. A null value (cost per unit of a team without units) is no sample.
CREATE OR REPLACE VIEW report_gauges AS
WITH hours AS (
    SELECT month, team, 1 AS n, 'productive' AS state, productive_gpu_hours AS value FROM chargeback_monthly
    UNION ALL SELECT month, team, 2, 'allocated_idle', allocated_idle_gpu_hours FROM chargeback_monthly
    UNION ALL SELECT month, team, 3, 'failed', failed_gpu_hours FROM chargeback_monthly
    UNION ALL SELECT month, team, 4, 'preempted', preempted_gpu_hours FROM chargeback_monthly
    UNION ALL SELECT month, team, 5, 'unallocated', unallocated_gpu_hours FROM chargeback_monthly
),
costs AS (
    SELECT month, team, 1 AS n, 'compute' AS component, compute AS value FROM chargeback_monthly
    UNION ALL SELECT month, team, 2, 'network', network FROM chargeback_monthly
    UNION ALL SELECT month, team, 3, 'storage', storage FROM chargeback_monthly
    UNION ALL SELECT month, team, 4, 'support', support FROM chargeback_monthly
    UNION ALL SELECT month, team, 5, 'idle', idle FROM chargeback_monthly
    UNION ALL SELECT month, team, 6, 'failed_runs', failed_runs FROM chargeback_monthly
    UNION ALL SELECT month, team, 7, 'operations', operations FROM chargeback_monthly
    UNION ALL SELECT month, team, 8, 'total', total FROM chargeback_monthly
)
-- gauge_rank and label_rank keep the exposition in a stable order (gauge, month, team, label).
SELECT 1 AS gauge_rank, 'gpuledger_gpu_hours' AS gauge, month, team, n AS label_rank, 'state' AS label, state AS label_value, CAST(value AS DOUBLE) AS value FROM hours
UNION ALL
SELECT 2, 'gpuledger_cost', month, team, n, 'component', component, CAST(value AS DOUBLE) FROM costs
UNION ALL
SELECT 3, 'gpuledger_lost_gpu_hours_platform_paid', month, team, 0, CAST(NULL AS VARCHAR), CAST(NULL AS VARCHAR), CAST(lost_gpu_hours_platform_paid AS DOUBLE) FROM chargeback_monthly
UNION ALL
SELECT 4, 'gpuledger_lost_cost_platform_paid', month, team, 0, NULL, NULL, CAST(lost_cost_platform_paid AS DOUBLE) FROM chargeback_monthly
UNION ALL
SELECT 5, 'gpuledger_accepted_units', month, team, 0, NULL, NULL, CAST(accepted_units AS DOUBLE) FROM chargeback_monthly
UNION ALL
SELECT 6, 'gpuledger_cost_per_accepted_unit', month, team, 0, NULL, NULL, CAST(cost_per_accepted_unit AS DOUBLE) FROM chargeback_monthly
WHERE cost_per_accepted_unit IS NOT NULL;
