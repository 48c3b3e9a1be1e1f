-- 90  What the month report, the HTTP API and /metrics read.
--
-- Every figure a report shows comes from these views or from the derived tables they read; the
-- Rust side filters by month (a bound parameter) and formats, nothing more. The views read only
-- derived tables (priced_state_hours, chargeback_monthly, accepted_units_monthly), so they run
-- the same in an accounting session and over a store's stored ledger (`gpuledger serve`).
--
-- Money stays exact here too: costs are DECIMAL(38, 6) sums of the priced rows and of the
-- chargeback's amounts (60_chargeback.sql says where each rounded), GPU-hours are summed as
-- integer GPU-nanoseconds and converted at the end, so a team's FOCUS rows add up to its
-- chargeback total exactly. Only /metrics (report_gauges) turns amounts into floats, as
-- Prometheus samples are.

-- GPU-hours and cost per month, team, state and GPU model: the grain of the FOCUS export and
-- the report's usage table. Lost time whose cost the platform pays (55) is its own row
-- (platform_paid), charged to the team `platform`. A team's accepted units go to its productive
-- rows in proportion to their GPU-hours, so that units per model add up to the team's units.
CREATE OR REPLACE VIEW report_usage AS
WITH usage AS (
    SELECT month, team, state, COALESCE(model_name, 'unknown') AS model_name,
           COALESCE(paid_by = 'platform', false) AS platform_paid,
           SUM(ns) AS ns,
           CAST(SUM(ns) AS DOUBLE) / 3600000000000.0 AS gpu_hours,
           CAST(SUM(CASE WHEN provisional THEN ns ELSE 0 END) AS DOUBLE) / 3600000000000.0 AS provisional_gpu_hours,
           SUM(cost) AS cost
    FROM (SELECT *, CAST(gpu_ns AS DECIMAL(38, 0)) AS ns FROM priced_state_hours)
    GROUP BY month, team, state, COALESCE(model_name, 'unknown'), COALESCE(paid_by = 'platform', false)
),
team_units AS (
    SELECT month, team, CAST(SUM(CAST(accepted_units AS DECIMAL(38, 6))) AS DOUBLE) AS accepted_units
    FROM accepted_units_monthly GROUP BY month, team
),
team_productive AS (
    SELECT month, team, SUM(ns) AS ns
    FROM usage WHERE state = 'productive' GROUP BY month, team
)
SELECT u.month, u.team, u.state, u.model_name, u.gpu_hours, u.provisional_gpu_hours, u.cost,
       CASE WHEN u.state = 'productive' AND p.ns > 0
            THEN COALESCE(t.accepted_units, 0) * CAST(u.ns AS DOUBLE) / CAST(p.ns AS DOUBLE)
            ELSE 0.0 END AS accepted_units,
       u.platform_paid
FROM usage u
LEFT JOIN team_units t ON t.month = u.month AND t.team = u.team
LEFT JOIN team_productive p ON p.month = u.month AND p.team = u.team;

-- GPU-hours and cost per UTC hour, team and state: the HTTP API's time series
-- (/api/v1/states), which adds hours up into steps of whole hours counted from 1970-01-01, as
-- date_bin does (hour_number is the hour's count from then): it sums `gpu_ns` (exact), not
-- `gpu_hours`.
CREATE OR REPLACE VIEW report_state_hours AS
SELECT hour, CAST(date_part('epoch', to_timestamp(hour)) AS BIGINT) / 3600 AS hour_number, team, state,
       SUM(ns) AS gpu_ns, CAST(SUM(ns) AS DOUBLE) / 3600000000000.0 AS gpu_hours, SUM(cost) AS cost
FROM (SELECT *, CAST(gpu_ns AS DECIMAL(38, 0)) AS ns FROM priced_state_hours)
GROUP BY hour, team, state;

-- Months with GPU time, overheads or units, and their GPU-hours in every state (the busiest
-- month is the default of `report` and the API), summed as nanoseconds.
CREATE OR REPLACE VIEW report_months AS
SELECT c.month, COALESCE(h.gpu_hours, 0.0) AS gpu_hours
FROM (SELECT DISTINCT month FROM chargeback_monthly) c
LEFT JOIN (SELECT month, CAST(SUM(CAST(gpu_ns AS DECIMAL(38, 0))) AS DOUBLE) / 3600000000000.0 AS gpu_hours
           FROM priced_state_hours GROUP BY month) h ON h.month = c.month;

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
-- Units by name (1M-tokens, training-run, ...); the cost of one is labelled with the team's unit
-- where it counts units of one name, else `mixed` (the cost per unit then adds names up).
SELECT 5, 'gpuledger_accepted_units', month, team, CAST(ROW_NUMBER() OVER (PARTITION BY month, team ORDER BY unit) AS INT), 'unit', unit,
       CAST(accepted_units AS DOUBLE) FROM accepted_units_monthly
UNION ALL
SELECT 6, 'gpuledger_cost_per_accepted_unit', c.month, c.team, 0, 'unit', CASE WHEN u.names = 1 THEN u.unit ELSE 'mixed' END,
       CAST(c.cost_per_accepted_unit AS DOUBLE)
FROM chargeback_monthly c
JOIN (SELECT month, team, COUNT(*) AS names, MIN(unit) AS unit FROM accepted_units_monthly GROUP BY month, team) u
  ON u.month = c.month AND u.team = c.team
WHERE c.cost_per_accepted_unit IS NOT NULL
UNION ALL
-- Budgets (65_budgets.sql): what a Grafana alert rule watches.
SELECT 7, 'gpuledger_budget', month, team, 0, NULL, NULL, CAST(budget AS DOUBLE) FROM budget_monthly
UNION ALL
SELECT 8, 'gpuledger_budget_used_ratio', month, team, 0, NULL, NULL, CAST(used_ratio AS DOUBLE) FROM budget_monthly
UNION ALL
SELECT 9, 'gpuledger_budget_forecast_ratio', month, team, 0, NULL, NULL, CAST(forecast_ratio AS DOUBLE) FROM budget_monthly
UNION ALL
-- Energy (67_energy.sql), beside the cost.
SELECT 10, 'gpuledger_energy_kwh', month, team, 0, NULL, NULL, CAST(SUM(kwh) AS DOUBLE) FROM energy_monthly GROUP BY month, team
UNION ALL
-- Why idle (68_why_idle.sql): idle hours by reason; platform's `stranded` hours say that GPU
-- Workloads waited while capacity that could serve them stood unallocated.
SELECT 11, 'gpuledger_idle_gpu_hours', month, team,
       CASE reason WHEN 'startup' THEN 1 WHEN 'stall' THEN 2 WHEN 'teardown' THEN 3
                   WHEN 'cordoned' THEN 4 WHEN 'stranded' THEN 5 ELSE 6 END,
       'reason', reason, CAST(gpu_hours AS DOUBLE)
FROM idle_reasons_monthly
UNION ALL
-- Spend anomalies (69_anomalies.sql): each team's latest complete day, what an alert rule
-- watches (flagged == 1); the score is absent until the team has 7 baseline days.
SELECT 12, 'gpuledger_anomaly_score', a.month, a.team, 0, 'day', a.day, a.score
FROM anomalies_daily a JOIN (SELECT MAX(day) AS day FROM anomalies_daily) l ON l.day = a.day
UNION ALL
SELECT 13, 'gpuledger_anomaly_flagged', a.month, a.team, 0, 'day', a.day, CASE WHEN a.flagged THEN 1.0 ELSE 0.0 END
FROM anomalies_daily a JOIN (SELECT MAX(day) AS day FROM anomalies_daily) l ON l.day = a.day;

-- Energy per month and team beside its cost: GPU kWh, facility kWh and emissions, and GPU kWh
-- per accepted unit next to cost per accepted unit (null without units). The GPU-hours are
-- summed as nanoseconds over priced_state_hours; kWh are floats (energy is not money).
CREATE OR REPLACE VIEW report_energy AS
SELECT e.month, e.team, e.kwh, e.facility_kwh, e.kg_co2e, h.gpu_hours, h.measured_gpu_hours,
       CASE WHEN c.accepted_units > 0 THEN e.kwh / c.accepted_units END AS kwh_per_accepted_unit,
       c.cost_per_accepted_unit
FROM (SELECT month, team, SUM(kwh) AS kwh, SUM(facility_kwh) AS facility_kwh, SUM(kg_co2e) AS kg_co2e
      FROM energy_monthly GROUP BY month, team) e
LEFT JOIN (SELECT month, team, CAST(SUM(ns) AS DOUBLE) / 3600000000000.0 AS gpu_hours,
                  CAST(SUM(CASE WHEN energy_kwh IS NOT NULL THEN ns ELSE 0 END) AS DOUBLE) / 3600000000000.0 AS measured_gpu_hours
           FROM (SELECT *, CAST(gpu_ns AS DECIMAL(38, 0)) AS ns FROM priced_state_hours)
           GROUP BY month, team) h ON h.month = e.month AND h.team = e.team
LEFT JOIN chargeback_monthly c ON c.month = e.month AND c.team = e.team;

-- The month as a FinOps FOCUS 1.2 cost and usage dataset (`gpuledger report --format focus`),
-- one row per charge, each team a sub-account. Three kinds of row:
--   1 GPU time: one per report_usage row, its GPU-hours and price-list cost. Lost time the
--     platform pays for is on platform's account, its description naming whose run it was.
--   2 Shared overhead: one per nonzero network, storage, support or operations amount of a
--     team's chargeback row; no GPU-hours.
--   3 Reconciliation: per team, BilledCost must add up to its chargeback total, but the usage
--     rows carry price-list cost and the idle policy may have moved cost between teams
--     (`share` spreads unallocated time over them). So where
--     d = total - (its GPU time rows + its overhead rows) is not 0, one more row carries d:
--     negative for platform, whose unallocated time was shared out, positive for the teams
--     that received a share. Every amount is an exact decimal (DECIMAL(38, 6)), so d is 0
--     exactly where nothing moved, and a team's rows add up to its total to the micro-unit.
-- Kinds 1 and 2 are ChargeCategory Usage (overheads are consumption-based shared costs, not
-- purchases): GPU time is priced and consumed in GPU-Hours, an overhead share is one Month of
-- the team's share (ChargeFrequency Recurring). Kind 3 moves cost between teams and measures
-- nothing: an Adjustment with no pricing or consumed quantity.
-- The four cost columns are equal (one price list, no discounts or commitments) and ChargeClass
-- is null (no row corrects an earlier period). Columns FOCUS does not define start with x_.
-- What only the configuration knows (BillingCurrency, BillingAccountId and Name, InvoiceId,
-- InvoiceIssuerName, ProviderName, PublisherName) is added by the writer: a stored ledger does
-- not hold it. row_kind and row_rank order a team's rows; month selects the month.
CREATE OR REPLACE VIEW report_focus AS
WITH gpu_time AS (
    SELECT month,
           CASE WHEN platform_paid THEN 'platform' ELSE team END AS account,
           team, state, model_name, gpu_hours, provisional_gpu_hours, accepted_units, cost,
           CASE state WHEN 'productive' THEN 'compute'
                      WHEN 'allocated_idle' THEN 'idle'
                      WHEN 'unallocated' THEN 'idle'
                      ELSE 'failed_runs' END AS component,
           CASE WHEN platform_paid
                THEN 'GPU time, ' || state || ' (paid by the platform for ' || team || '), ' || model_name
                ELSE 'GPU time, ' || state || ', ' || model_name END AS description,
           CAST(ROW_NUMBER() OVER (PARTITION BY month ORDER BY team, state, model_name, platform_paid) AS BIGINT) AS row_rank
    FROM report_usage
),
overheads AS (
    SELECT month, team, 1 AS n, 'network' AS component, network AS cost FROM chargeback_monthly
    UNION ALL SELECT month, team, 2, 'storage', storage FROM chargeback_monthly
    UNION ALL SELECT month, team, 3, 'support', support FROM chargeback_monthly
    UNION ALL SELECT month, team, 4, 'operations', operations FROM chargeback_monthly
),
charged AS (
    SELECT month, account AS team, cost FROM gpu_time
    UNION ALL SELECT month, team, cost FROM overheads WHERE cost <> 0
),
reconciliation AS (
    SELECT c.month, c.team, c.total, c.total - COALESCE(SUM(x.cost), 0) AS cost
    FROM chargeback_monthly c
    LEFT JOIN charged x ON x.month = c.month AND x.team = c.team
    GROUP BY c.month, c.team, c.total
),
focus_rows AS (
    SELECT month, account, 1 AS row_kind, row_rank, cost, description,
           'gpu-model/' || model_name AS resource_id, model_name AS resource_name, true AS gpu,
           state, gpu_hours, provisional_gpu_hours, accepted_units, component
    FROM gpu_time
    UNION ALL
    SELECT month, team AS account, 2 AS row_kind, n AS row_rank, cost,
           'Shared overhead: ' || component AS description,
           'overhead/' || component AS resource_id, component AS resource_name, false AS gpu,
           CAST(NULL AS VARCHAR) AS state, 0.0 AS gpu_hours, 0.0 AS provisional_gpu_hours,
           0.0 AS accepted_units, component
    FROM overheads WHERE cost <> 0
    UNION ALL
    SELECT month, team AS account, 3 AS row_kind, 0 AS row_rank, cost,
           'Share of unallocated GPU time' AS description,
           'gpu-pool/unallocated' AS resource_id, 'unallocated GPU time' AS resource_name, true AS gpu,
           'unallocated' AS state, 0.0 AS gpu_hours, 0.0 AS provisional_gpu_hours,
           0.0 AS accepted_units, 'idle' AS component
    FROM reconciliation WHERE cost <> 0
)
SELECT month, row_kind, row_rank,
       -- Exact: FOCUS's cost columns are decimals.
       cost AS "BilledCost",
       cost AS "EffectiveCost",
       cost AS "ListCost",
       cost AS "ContractedCost",
       to_timestamp(month || '-01T00:00:00Z') AS "BillingPeriodStart",
       to_timestamp(month || '-01T00:00:00Z') + INTERVAL '1 month' AS "BillingPeriodEnd",
       to_timestamp(month || '-01T00:00:00Z') AS "ChargePeriodStart",
       to_timestamp(month || '-01T00:00:00Z') + INTERVAL '1 month' AS "ChargePeriodEnd",
       CASE WHEN row_kind = 3 THEN 'Adjustment' ELSE 'Usage' END AS "ChargeCategory",
       CAST(NULL AS VARCHAR) AS "ChargeClass",
       CASE WHEN row_kind = 2 THEN 'Recurring' ELSE 'Usage-Based' END AS "ChargeFrequency",
       description AS "ChargeDescription",
       CASE row_kind WHEN 1 THEN CAST(gpu_hours AS DOUBLE) WHEN 2 THEN 1.0 END AS "PricingQuantity",
       CASE row_kind WHEN 1 THEN 'GPU-Hours' WHEN 2 THEN 'Month' END AS "PricingUnit",
       CASE row_kind WHEN 1 THEN CAST(gpu_hours AS DOUBLE) WHEN 2 THEN 1.0 END AS "ConsumedQuantity",
       CASE row_kind WHEN 1 THEN 'GPU-Hours' WHEN 2 THEN 'Month' END AS "ConsumedUnit",
       -- No commitment discounts here; the column is present, null, because the FOCUS rules
       -- for ConsumedQuantity read it.
       CAST(NULL AS VARCHAR) AS "CommitmentDiscountStatus",
       resource_id AS "ResourceId",
       resource_name AS "ResourceName",
       CASE WHEN gpu THEN 'GPU' ELSE 'Overhead' END AS "ResourceType",
       CASE WHEN gpu THEN 'GPU compute' ELSE 'Platform ' || component END AS "ServiceName",
       CASE WHEN gpu THEN 'AI and Machine Learning' ELSE 'Management and Governance' END AS "ServiceCategory",
       CASE WHEN gpu THEN 'AI Platforms'
            WHEN component = 'support' THEN 'Support'
            ELSE 'Other (Management and Governance)' END AS "ServiceSubcategory",
       account AS "SubAccountId",
       account AS "SubAccountName",
       -- A JSON object. Team names are Kubernetes names or label values, which hold no quote
       -- or backslash, but a capture file is not checked by an API server: escape both
       -- (chr(92) is the backslash, chr(34) the double quote).
       '{"gpuledger/team":"' || replace(replace(account, chr(92), chr(92) || chr(92)), chr(34), chr(92) || chr(34)) || '"'
           || CASE WHEN state IS NULL THEN '' ELSE ',"gpuledger/state":"' || state || '"' END
           || ',"gpuledger/component":"' || component || '"}' AS "Tags",
       CAST(gpu_hours AS DOUBLE) AS "x_GpuHours",
       CAST(provisional_gpu_hours AS DOUBLE) AS "x_ProvisionalGpuHours",
       state AS "x_State",
       CAST(accepted_units AS DOUBLE) AS "x_AcceptedUnits",
       component AS "x_CostComponent"
FROM focus_rows;
