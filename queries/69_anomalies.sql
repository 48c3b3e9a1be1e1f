-- 69  Spend anomalies: each team's day of GPU cost against its own recent days.
--
-- A team's day cost is the price-list cost of its own allocated time that UTC day (productive,
-- allocated_idle, failed, preempted), before any idle policy or who-pays rule: what the team's
-- own pods held. Its baseline is the median of the (at most) 14 UTC days before it on which the
-- store has observations, days without cost counted as zero, and a day is scored once it has at
-- least 7 such days. An even count takes the mean of the middle two, rounded half to even to the
-- micro-unit, as every amount that needs more than a sum (money_ratio).
--
--   MAD      = median of the baseline days' absolute deviations from the baseline
--   spread   = max(1.4826 x MAD, 5% of the baseline)      (both rounded to the micro-unit)
--   score    = (cost - baseline) / spread                  (a ratio: a float)
--   flagged  = score >= [anomalies] k (default 3); with a spread of 0, cost > baseline
--
-- Only complete days are scored: the store has observations after the day's end (a later day).
-- queries/tests/anomalies.slt works a team's month by hand.

-- Days with observations, in order, and whether a later one exists.
CREATE OR REPLACE VIEW anomaly_observed_days AS
SELECT day, ROW_NUMBER() OVER (ORDER BY day) AS n, day < MAX(day) OVER () AS complete
FROM (SELECT DISTINCT day FROM priced_state_hours WHERE day IS NOT NULL);

-- Every team that ever held GPUs, on every observed day: its cost, zero on a day without any.
CREATE OR REPLACE VIEW anomaly_team_days AS
SELECT t.team, d.day, d.n, d.complete, COALESCE(c.cost, CAST(0 AS DECIMAL(38, 6))) AS cost
FROM (SELECT DISTINCT team FROM priced_state_hours WHERE state <> 'unallocated' AND team IS NOT NULL) t
CROSS JOIN anomaly_observed_days d
LEFT JOIN (SELECT team, day, SUM(cost) AS cost FROM priced_state_hours
           WHERE state <> 'unallocated' GROUP BY team, day) c ON c.team = t.team AND c.day = d.day;

-- For each complete team-day, the costs of its baseline days, ranked, and how many there are.
CREATE OR REPLACE VIEW anomaly_history AS
SELECT s.team, s.day, h.cost,
       ROW_NUMBER() OVER (PARTITION BY s.team, s.day ORDER BY h.cost) AS pos,
       COUNT(*) OVER (PARTITION BY s.team, s.day) AS days
FROM anomaly_team_days s
JOIN anomaly_team_days h ON h.team = s.team AND h.n >= s.n - 14 AND h.n < s.n
WHERE s.complete;

-- The median: the middle value, or the mean of the middle two: the positions with
-- days <= 2 x pos <= days + 2 (one for an odd count, two for an even one; no division, which
-- engines round differently).
CREATE OR REPLACE VIEW anomaly_baselines AS
SELECT team, day, MAX(days) AS days, money_ratio(SUM(cost), 1, COUNT(*)) AS baseline
FROM anomaly_history
WHERE 2 * pos BETWEEN days AND days + 2
GROUP BY team, day;

CREATE OR REPLACE VIEW anomaly_spreads AS
WITH deviations AS (
    SELECT h.team, h.day, h.days, b.baseline, ABS(h.cost - b.baseline) AS deviation,
           ROW_NUMBER() OVER (PARTITION BY h.team, h.day ORDER BY ABS(h.cost - b.baseline)) AS pos
    FROM anomaly_history h JOIN anomaly_baselines b ON b.team = h.team AND b.day = h.day
),
mads AS (
    SELECT team, day, MAX(days) AS days, MAX(baseline) AS baseline, money_ratio(SUM(deviation), 1, COUNT(*)) AS mad
    FROM deviations WHERE 2 * pos BETWEEN days AND days + 2 GROUP BY team, day
)
SELECT team, day, days, baseline, mad,
       GREATEST(money_ratio(mad, 14826, 10000), money_ratio(baseline, 5, 100)) AS spread
FROM mads;

-- One row per team and complete day; baseline, spread and score are null before 7 baseline days.
CREATE OR REPLACE VIEW anomalies_daily AS
SELECT d.day, substr(d.day, 1, 7) AS month, d.team, d.cost,
       CASE WHEN a.days >= 7 THEN a.baseline END AS baseline,
       CASE WHEN a.days >= 7 THEN a.spread END AS spread,
       CASE WHEN a.days >= 7 AND a.spread > 0
            THEN CAST(d.cost - a.baseline AS DOUBLE) / CAST(a.spread AS DOUBLE) END AS score,
       COALESCE(a.days >= 7 AND CASE WHEN a.spread > 0
                                     THEN CAST(d.cost - a.baseline AS DOUBLE) / CAST(a.spread AS DOUBLE) >= s.anomaly_k
                                     ELSE d.cost > a.baseline END, false) AS flagged,
       COALESCE(a.days, 0) AS baseline_days
FROM anomaly_team_days d
CROSS JOIN settings s
LEFT JOIN anomaly_spreads a ON a.team = d.team AND a.day = d.day
WHERE d.complete;
