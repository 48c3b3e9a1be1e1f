-- 60  Cost and the monthly chargeback per team.
--
-- Price of a GPU-hour: by node label (a node pool), else by GPU model, else the default; MIG
-- instances pay their fraction (their GPU time is already a fraction). Per team and month:
--
--   compute     = cost of productive time
--   idle        = cost of allocated_idle time + the team's share of unallocated time
--   failed_runs = cost of failed + preempted time, less what the platform pays for (55); the
--                 platform team's failed_runs is what it pays for
--   network, storage, support, operations = configured amounts, given per team or spread over
--                 teams in proportion to their allocated GPU time
--   total       = compute + network + storage + support + idle + failed_runs + operations
--   cost_per_accepted_unit = total / accepted_units (null when no units)
--
-- Idle policy `platform` keeps unallocated cost on the team `platform`; `share` spreads it over
-- teams by allocated GPU time; `quota` charges each hour's unallocated cost of a flavor's nodes
-- to the owners of unused quota there (58_quota.sql, quota_cost_parts below). The hours stay
-- `platform`'s. A month with no allocated time
-- leaves every spread amount with `platform`. `lost_gpu_hours_platform_paid` and
-- `lost_cost_platform_paid` say how much of a team's failed and preempted time the platform paid.
--
-- Money is exact (docs/accounting.md "Money is exact"): amounts are DECIMAL(38, 6), whole micro-units of
-- the currency, and they round in three places only, each once:
--   - each hourly row of GPU time is priced once: gpu_ns x price / 3.6e12 (ns per hour),
--     rounded half to even to the micro-unit (`price_ns`); every cost above is a sum of rows;
--   - an amount spread over teams (an overhead without a team, the `share` policy's unallocated
--     cost) gives each team the floor of its exact share, in micro-units, and the micro-units
--     the floors leave one each to the teams with the largest remainders (ties: team names in
--     ascending order), so that the parts add up to the amount exactly (spread_parts);
--   - cost_per_accepted_unit is total / units rounded half to even to the micro-unit (the units
--     taken to 6 decimals first).
-- GPU-hours are sums of integer GPU-nanoseconds (40_states.sql) turned into hours at the end.
-- Sums of decimals and of integers do not depend on the order of their terms, so no engine,
-- file layout or run (full, incremental, memory-limited) changes a figure.

-- The price each node's labels earn, from price_by_node_label (the lowest rank wins when a node
-- matches several rules).
CREATE OR REPLACE VIEW node_prices AS
SELECT node, price, label_key, label_value
FROM (
    SELECT n.node, p.price, p.label_key, p.label_value,
           ROW_NUMBER() OVER (PARTITION BY n.node ORDER BY p.rank) AS price_rank
    FROM nodes_latest n
    JOIN price_by_node_label p ON label(n.labels, p.label_key) = p.label_value
) WHERE price_rank = 1;

-- The price of each node and GPU model the month's GPU time names: by the node's labels (its
-- node pool), else by its GPU model, else the default.
CREATE OR REPLACE VIEW node_model_prices AS
SELECT k.node, k.model_name,
       COALESCE(np.price, np2.price, pm.price, s.default_price) AS price,
       COALESCE(np.label_value, np2.label_value) AS pool
FROM settings s
CROSS JOIN (SELECT DISTINCT node, model_name FROM gpu_state_hours) k
LEFT JOIN node_prices np ON np.node = k.node
-- The DCGM Hostname may be the node's kubernetes.io/hostname label rather than its name.
LEFT JOIN (SELECT n.hostname_label, MIN(p.price) AS price, MIN(p.label_value) AS label_value
           FROM nodes_latest n JOIN node_prices p ON p.node = n.node
           WHERE n.hostname_label IS NOT NULL AND n.hostname_label <> n.node
           GROUP BY n.hostname_label) np2 ON np.node IS NULL AND np2.hostname_label = k.node
LEFT JOIN price_by_model pm ON pm.model_name = k.model_name;

-- Each hourly row of GPU time with its price and cost. The small tables come first in these
-- joins: DataFusion builds a join's hash table from its left side, and held in memory the
-- month's rows would be the biggest thing of a run (hence RIGHT JOIN for the payers).
CREATE OR REPLACE VIEW priced_state_hours AS
SELECT hp.*,
       -- Who pays for lost time (55_who_pays.sql): `platform` or `team`; null for other states.
       CASE WHEN hp.state IN ('failed', 'preempted') THEN COALESCE(lp.paid_by, 'team') END AS paid_by
FROM lost_segment_payers lp
RIGHT JOIN (
    SELECT h.*,
           p.price,
           -- The row's cost, rounded once, half to even, to the micro-unit.
           price_ns(h.gpu_ns, p.price) AS cost,
           p.pool
    FROM node_model_prices p
    -- Every row's node and model are in node_model_prices; RIGHT JOIN tells the planner the
    -- join has at least the month's rows, so that it does not take the month for the small side.
    RIGHT JOIN gpu_state_hours h ON (p.node IS NOT DISTINCT FROM h.node) AND (p.model_name IS NOT DISTINCT FROM h.model_name)
) hp ON lp.namespace = hp.namespace AND lp.run = hp.run AND lp.segment = hp.segment;

-- The `quota` idle policy's parts (58_quota.sql): each hour's unallocated cost of a flavor's
-- nodes, split by quota_weights among the ClusterQueues with unused quota there and the
-- platform's rest (cluster_queue null), by largest remainder as spread_parts below (ties:
-- ClusterQueue names ascending, the rest last). Unallocated time on nodes no GPU flavor selects
-- is one part, the platform's.
-- The split is written out here rather than shared with spread_parts: spread_parts' weights
-- (team_month_weights) are over chargeback_teams, which holds the owners this split charges,
-- so one view computing both would depend on itself.
CREATE OR REPLACE VIEW quota_cost_parts AS
SELECT month, hour_ms, flavor, cluster_queue,
       floor_part + CASE WHEN ROW_NUMBER() OVER (PARTITION BY hour_ms, flavor ORDER BY remainder DESC, cluster_queue NULLS LAST)
                              <= leftover THEN CAST(0.000001 AS DECIMAL(38, 6)) ELSE 0 END AS amount
FROM (
    SELECT *, (cost - SUM(floor_part) OVER (PARTITION BY hour_ms, flavor)) * 1000000 AS leftover
    FROM (
        SELECT c.month, w.hour_ms, w.flavor, w.cluster_queue, c.cost,
               share_floor(c.cost, w.weight, w.whole) AS floor_part,
               share_remainder(c.cost, w.weight, w.whole) AS remainder
        FROM quota_weights w
        JOIN (SELECT p.month, CAST(date_part('epoch', to_timestamp(p.hour)) AS BIGINT) * 1000 AS hour_ms, q.flavor, SUM(p.cost) AS cost
              FROM priced_state_hours p
              LEFT JOIN quota_flavor_nodes q ON q.node = p.node
              WHERE p.state = 'unallocated'
              GROUP BY p.month, CAST(date_part('epoch', to_timestamp(p.hour)) AS BIGINT) * 1000, q.flavor) c
          ON c.hour_ms = w.hour_ms AND (c.flavor IS NOT DISTINCT FROM w.flavor)
    )
);

-- What the `quota` policy charges each team per month: its ClusterQueues' parts; the rest and
-- the parts of queues nobody owns are the platform's.
CREATE OR REPLACE VIEW quota_team_idle AS
SELECT p.month, COALESCE(o.team, 'platform') AS team, SUM(p.amount) AS amount
FROM quota_cost_parts p
LEFT JOIN quota_queue_owners o ON o.cluster_queue = p.cluster_queue
GROUP BY p.month, COALESCE(o.team, 'platform');

-- GPU time (integer GPU-nanoseconds, summed as DECIMAL(38, 0): a month of a large fleet passes
-- BIGINT's 9.2e18) and price-list cost per month, team and state.
CREATE OR REPLACE VIEW team_month_usage AS
SELECT month, team,
       SUM(CASE WHEN state = 'productive' THEN ns ELSE 0 END) AS productive_ns,
       SUM(CASE WHEN state = 'allocated_idle' THEN ns ELSE 0 END) AS allocated_idle_ns,
       SUM(CASE WHEN state = 'failed' THEN ns ELSE 0 END) AS failed_ns,
       SUM(CASE WHEN state = 'preempted' THEN ns ELSE 0 END) AS preempted_ns,
       SUM(CASE WHEN state = 'unallocated' THEN ns ELSE 0 END) AS unallocated_ns,
       SUM(CASE WHEN state <> 'unallocated' THEN ns ELSE 0 END) AS allocated_ns,
       SUM(CASE WHEN provisional THEN ns ELSE 0 END) AS provisional_ns,
       SUM(CASE WHEN state = 'productive' THEN cost ELSE 0 END) AS productive_cost,
       SUM(CASE WHEN state = 'allocated_idle' THEN cost ELSE 0 END) AS allocated_idle_cost,
       SUM(CASE WHEN state IN ('failed', 'preempted') THEN cost ELSE 0 END) AS failed_cost,
       SUM(CASE WHEN state = 'unallocated' THEN cost ELSE 0 END) AS unallocated_cost,
       SUM(CASE WHEN paid_by = 'platform' THEN ns ELSE 0 END) AS lost_ns_platform_paid,
       SUM(CASE WHEN paid_by = 'platform' THEN cost ELSE 0 END) AS lost_cost_platform_paid
FROM (SELECT *, CAST(gpu_ns AS DECIMAL(38, 0)) AS ns FROM priced_state_hours)
GROUP BY month, team;

-- Each month's allocated GPU time (the key for spreading), unallocated cost (what the idle
-- policy hands out) and the lost cost the platform pays for.
CREATE OR REPLACE VIEW month_usage AS
SELECT month, SUM(allocated_ns) AS allocated_ns, SUM(unallocated_cost) AS unallocated_cost,
       SUM(lost_cost_platform_paid) AS lost_cost_platform_paid
FROM team_month_usage
GROUP BY month;

-- Every (month, team) the chargeback has a row for: teams with GPU time, direct overheads or
-- accepted units, and `platform` in every month that has anything at all.
CREATE OR REPLACE VIEW chargeback_teams AS
SELECT DISTINCT month, team FROM (
    SELECT month, team FROM team_month_usage
    UNION ALL SELECT month, team FROM overheads WHERE team IS NOT NULL
    UNION ALL SELECT month, team FROM accepted_units_monthly
    UNION ALL SELECT month, 'platform' FROM team_month_usage
    UNION ALL SELECT month, 'platform' FROM overheads
    -- Under `quota`, an owner of unused quota is charged even in a month it used no GPU.
    UNION ALL SELECT q.month, q.team FROM quota_team_idle q CROSS JOIN settings s WHERE s.idle_policy = 'quota'
);

-- Each team's weight for spreading an amount over its month: its allocated GPU-nanoseconds,
-- of the month's (`whole`). With no allocated time in a month, `platform` weighs 1 of 1.
CREATE OR REPLACE VIEW team_month_weights AS
SELECT t.month, t.team,
       CASE WHEN COALESCE(m.allocated_ns, 0) > 0 THEN COALESCE(u.allocated_ns, 0)
            WHEN t.team = 'platform' THEN 1 ELSE 0 END AS weight,
       CASE WHEN COALESCE(m.allocated_ns, 0) > 0 THEN m.allocated_ns ELSE 1 END AS whole
FROM chargeback_teams t
LEFT JOIN team_month_usage u ON u.month = t.month AND u.team = t.team
LEFT JOIN month_usage m ON m.month = t.month;

-- What is spread over a month's teams by weight: each overhead component's amounts given
-- without a team, and, under the `share` idle policy, the month's unallocated cost (`idle`).
CREATE OR REPLACE VIEW spread_amounts AS
SELECT month, component, SUM(amount) AS amount
FROM overheads WHERE team IS NULL
GROUP BY month, component
UNION ALL
SELECT m.month, 'idle' AS component, m.unallocated_cost AS amount
FROM settings s
CROSS JOIN month_usage m
WHERE s.idle_policy = 'share';

-- Each team's part of each spread amount, by largest remainder: the floor of its exact share
-- (amount x weight / whole, in whole micro-units), plus one micro-unit for each of the
-- `leftover` teams with the largest remainders (ties: team names in ascending order), leftover
-- being the micro-units the floors left. The parts add up to the amount exactly.
CREATE OR REPLACE VIEW spread_parts AS
SELECT month, team, component,
       floor_part + CASE WHEN ROW_NUMBER() OVER (PARTITION BY month, component ORDER BY remainder DESC, team)
                              <= leftover THEN CAST(0.000001 AS DECIMAL(38, 6)) ELSE 0 END AS amount
FROM (
    SELECT *, (amount - SUM(floor_part) OVER (PARTITION BY month, component)) * 1000000 AS leftover
    FROM (
        SELECT a.month, w.team, a.component, a.amount,
               share_floor(a.amount, w.weight, w.whole) AS floor_part,
               share_remainder(a.amount, w.weight, w.whole) AS remainder
        FROM spread_amounts a
        JOIN team_month_weights w ON w.month = a.month
    )
);

-- Overheads per month, team and component: direct amounts (per team) and parts of spread ones.
CREATE OR REPLACE VIEW overhead_amounts AS
SELECT month, team,
       SUM(CASE WHEN component = 'network' THEN amount ELSE 0 END) AS network,
       SUM(CASE WHEN component = 'storage' THEN amount ELSE 0 END) AS storage,
       SUM(CASE WHEN component = 'support' THEN amount ELSE 0 END) AS support,
       SUM(CASE WHEN component = 'operations' THEN amount ELSE 0 END) AS operations
FROM (
    SELECT month, team, component, amount FROM overheads WHERE team IS NOT NULL
    UNION ALL
    SELECT month, team, component, amount FROM spread_parts WHERE component <> 'idle'
)
GROUP BY month, team;

-- GPU-hours are the summed nanoseconds / 3.6e12, converted once per figure.
CREATE OR REPLACE VIEW chargeback_monthly AS
SELECT month, team, productive_gpu_hours, allocated_idle_gpu_hours, failed_gpu_hours,
       preempted_gpu_hours, unallocated_gpu_hours, compute, network, storage, support, idle,
       failed_runs, operations,
       compute + network + storage + support + idle + failed_runs + operations AS total,
       accepted_units,
       CASE WHEN accepted_units > 0
            THEN money_ratio(compute + network + storage + support + idle + failed_runs + operations, 1,
                             CAST(accepted_units AS DECIMAL(38, 6)))
       END AS cost_per_accepted_unit,
       provisional_gpu_hours, lost_gpu_hours_platform_paid, lost_cost_platform_paid
FROM (
    SELECT t.month, t.team,
           CAST(COALESCE(u.productive_ns, 0) AS DOUBLE) / 3600000000000.0 AS productive_gpu_hours,
           CAST(COALESCE(u.allocated_idle_ns, 0) AS DOUBLE) / 3600000000000.0 AS allocated_idle_gpu_hours,
           CAST(COALESCE(u.failed_ns, 0) AS DOUBLE) / 3600000000000.0 AS failed_gpu_hours,
           CAST(COALESCE(u.preempted_ns, 0) AS DOUBLE) / 3600000000000.0 AS preempted_gpu_hours,
           CAST(COALESCE(u.unallocated_ns, 0) AS DOUBLE) / 3600000000000.0 AS unallocated_gpu_hours,
           COALESCE(u.productive_cost, 0) AS compute,
           COALESCE(o.network, 0) AS network,
           COALESCE(o.storage, 0) AS storage,
           COALESCE(o.support, 0) AS support,
           COALESCE(u.allocated_idle_cost, 0)
             + CASE WHEN s.idle_policy = 'share' THEN COALESCE(i.amount, 0)
                    WHEN s.idle_policy = 'quota' THEN COALESCE(qi.amount, 0)
                    WHEN t.team = 'platform' THEN COALESCE(m.unallocated_cost, 0)
                    ELSE 0 END AS idle,
           COALESCE(u.failed_cost, 0) - COALESCE(u.lost_cost_platform_paid, 0)
             + CASE WHEN t.team = 'platform' THEN COALESCE(m.lost_cost_platform_paid, 0) ELSE 0 END AS failed_runs,
           COALESCE(o.operations, 0) AS operations,
           COALESCE(a.accepted_units, 0) AS accepted_units,
           CAST(COALESCE(u.provisional_ns, 0) AS DOUBLE) / 3600000000000.0 AS provisional_gpu_hours,
           CAST(COALESCE(u.lost_ns_platform_paid, 0) AS DOUBLE) / 3600000000000.0 AS lost_gpu_hours_platform_paid,
           COALESCE(u.lost_cost_platform_paid, 0) AS lost_cost_platform_paid
    FROM settings s
    CROSS JOIN chargeback_teams t
    LEFT JOIN team_month_usage u ON u.month = t.month AND u.team = t.team
    LEFT JOIN month_usage m ON m.month = t.month
    LEFT JOIN overhead_amounts o ON o.month = t.month AND o.team = t.team
    LEFT JOIN spread_parts i ON i.month = t.month AND i.team = t.team AND i.component = 'idle'
    LEFT JOIN quota_team_idle qi ON qi.month = t.month AND qi.team = t.team
    -- Units summed exactly over their names (accepted_units_monthly holds at most 6 decimals).
    LEFT JOIN (SELECT month, team, CAST(SUM(CAST(accepted_units AS DECIMAL(38, 6))) AS DOUBLE) AS accepted_units
               FROM accepted_units_monthly GROUP BY month, team) a ON a.month = t.month AND a.team = t.team
);
