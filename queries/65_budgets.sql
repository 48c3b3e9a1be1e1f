-- 65  Budgets: per team and month, what the team spent against its configured budget, and
-- where the month will end at this rate.
--
--   spend          = the team's chargeback total for the month (60), to date
--   gpu_cost       = compute + idle + failed_runs: the part that grows with GPU time
--   overheads      = network + storage + support + operations: configured for the whole month
--   elapsed        = min(data end, month end) - max(data start, month start), at least 0: the
--                    part of the month the data covers (data: first to last observed instant)
--   forecast       = spend                                          once the data has passed the month's end
--                  = overheads                                      while none of the month has elapsed
--                  = gpu_cost x month length / elapsed + overheads   otherwise
--   used_ratio     = spend / budget
--   forecast_ratio = forecast / budget
--
-- Amounts are exact (DECIMAL(38, 6), 60_chargeback.sql): the forecast's scaled GPU cost is
-- rounded once, half to even, to the micro-unit (`money_ratio`); the ratios are floats (they are
-- shares, not money).
--
-- A team's budget for a month is its `[[budgets]]` entry for that month, else its entry
-- without a month. Every budgeted team has a row in every month of the chargeback, at 0 spend
-- where it used nothing, so that an alert on it always has a value.

-- The data's extent: the earliest and the latest instant any GPU's samples cover.
CREATE OR REPLACE VIEW data_extent AS
SELECT MIN(first_ms) AS first_ms, MAX(last_ms) AS last_ms FROM observed_extent;

CREATE OR REPLACE VIEW budget_monthly AS
WITH months AS (
    SELECT month,
           epoch_ms(to_timestamp(month || '-01T00:00:00Z')) AS start_ms,
           epoch_ms(to_timestamp(month || '-01T00:00:00Z') + INTERVAL '1 month') AS end_ms
    FROM (SELECT DISTINCT month FROM chargeback_monthly)
),
month_budgets AS (
    SELECT month, team, amount
    FROM (
        SELECT m.month, b.team, b.amount,
               -- The entry for the month first, then the one without a month.
               ROW_NUMBER() OVER (PARTITION BY m.month, b.team ORDER BY CASE WHEN b.month IS NULL THEN 1 ELSE 0 END) AS pick
        FROM months m
        JOIN budgets b ON b.month = m.month OR b.month IS NULL
    )
    WHERE pick = 1
),
spent AS (
    SELECT b.month, b.team, b.amount AS budget, m.start_ms, m.end_ms,
           COALESCE(c.total, 0) AS spend,
           COALESCE(c.compute + c.idle + c.failed_runs, 0) AS gpu_cost,
           COALESCE(c.network + c.storage + c.support + c.operations, 0) AS overheads
    FROM month_budgets b
    JOIN months m ON m.month = b.month
    LEFT JOIN chargeback_monthly c ON c.month = b.month AND c.team = b.team
),
elapsed AS (
    SELECT s.*,
           COALESCE(GREATEST(LEAST(d.last_ms, s.end_ms) - GREATEST(d.first_ms, s.start_ms), 0), 0) AS elapsed_ms,
           COALESCE(d.last_ms >= s.end_ms, false) AS passed
    FROM spent s
    CROSS JOIN data_extent d
),
forecast AS (
    SELECT e.*,
           CASE WHEN passed THEN spend
                WHEN elapsed_ms = 0 THEN overheads
                ELSE money_ratio(gpu_cost, end_ms - start_ms, elapsed_ms) + overheads END AS forecast
    FROM elapsed e
)
SELECT month, team, budget, spend, gpu_cost, overheads,
       elapsed_ms / 86400000.0 AS elapsed_days,
       (end_ms - start_ms) / 86400000.0 AS month_days,
       forecast,
       CAST(spend AS DOUBLE) / CAST(budget AS DOUBLE) AS used_ratio,
       CAST(forecast AS DOUBLE) / CAST(budget AS DOUBLE) AS forecast_ratio
FROM forecast;
