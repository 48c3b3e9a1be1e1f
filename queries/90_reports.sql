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
