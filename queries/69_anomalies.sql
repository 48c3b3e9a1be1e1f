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

-- What drove a flagged day: per GPU and run of the team, that day's cost against the median of
-- the same GPU and run over the team's baseline days (zero where it held nothing), the largest
-- increases first. A notebook left holding four GPUs shows as four rows whose baseline is 0.
-- Keys: node, GPU (uuid), namespace, run; `pod` names a pod of the run on that node (the first
-- by name where several). At most 10 rows per flagged day, increases above zero only.
CREATE OR REPLACE VIEW anomaly_driver_costs AS
SELECT team, day, node, uuid, namespace, run, SUM(cost) AS cost
FROM priced_state_hours
WHERE state <> 'unallocated'
GROUP BY team, day, node, uuid, namespace, run;

CREATE OR REPLACE VIEW anomaly_drivers AS
WITH flagged AS (
    SELECT a.team, a.day, t.n FROM anomalies_daily a
    JOIN anomaly_team_days t ON t.team = a.team AND t.day = a.day
    WHERE a.flagged
),
keys AS (
    SELECT f.team, f.day, f.n, c.node, c.uuid, c.namespace, c.run, c.cost
    FROM flagged f JOIN anomaly_driver_costs c ON c.team = f.team AND c.day = f.day
),
-- Each key's cost on each of its flagged day's baseline days, zero where it had none, ranked.
history AS (
    SELECT k.team, k.day, k.node, k.uuid, k.namespace, k.run,
           ROW_NUMBER() OVER (PARTITION BY k.team, k.day, k.node, k.uuid, k.namespace, k.run
                              ORDER BY COALESCE(c.cost, CAST(0 AS DECIMAL(38, 6)))) AS pos,
           COUNT(*) OVER (PARTITION BY k.team, k.day, k.node, k.uuid, k.namespace, k.run) AS days,
           COALESCE(c.cost, CAST(0 AS DECIMAL(38, 6))) AS cost
    FROM keys k
    JOIN anomaly_observed_days d ON d.n >= k.n - 14 AND d.n < k.n
    LEFT JOIN anomaly_driver_costs c
           ON c.team = k.team AND c.day = d.day AND (c.node IS NOT DISTINCT FROM k.node) AND (c.uuid IS NOT DISTINCT FROM k.uuid)
          AND (c.namespace IS NOT DISTINCT FROM k.namespace) AND (c.run IS NOT DISTINCT FROM k.run)
),
medians AS (
    SELECT team, day, node, uuid, namespace, run, money_ratio(SUM(cost), 1, COUNT(*)) AS baseline
    FROM history WHERE 2 * pos BETWEEN days AND days + 2
    GROUP BY team, day, node, uuid, namespace, run
),
ranked AS (
    SELECT k.day, k.team, k.node, k.uuid, k.namespace, k.run, k.cost, m.baseline, k.cost - m.baseline AS increase,
           ROW_NUMBER() OVER (PARTITION BY k.team, k.day
                              ORDER BY k.cost - m.baseline DESC, k.node, k.uuid, k.namespace, k.run) AS rank
    FROM keys k
    JOIN medians m ON m.team = k.team AND m.day = k.day AND (m.node IS NOT DISTINCT FROM k.node) AND (m.uuid IS NOT DISTINCT FROM k.uuid)
                  AND (m.namespace IS NOT DISTINCT FROM k.namespace) AND (m.run IS NOT DISTINCT FROM k.run)
    WHERE k.cost > m.baseline
),
run_pods AS (
    SELECT namespace, run, node_name, MIN(pod) AS pod FROM pod_runs GROUP BY namespace, run, node_name
)
SELECT r.day, substr(r.day, 1, 7) AS month, r.team, r.rank, r.node, r.uuid, r.namespace, r.run, p.pod,
       r.cost, r.baseline, r.increase
FROM ranked r
LEFT JOIN run_pods p ON p.namespace = r.namespace AND p.run = r.run AND (p.node_name IS NOT DISTINCT FROM r.node)
WHERE r.rank <= 10;
