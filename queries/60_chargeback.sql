-- 60  Cost and the monthly chargeback per team.
--
-- Price of a GPU-hour: by node label (a node pool), else by GPU model, else the default; MIG
-- instances pay their fraction (their GPU-hours are already fractions). Per team and month:
--
--   compute     = cost of productive time
--   idle        = cost of allocated_idle time + the team's share of unallocated time
--   failed_runs = cost of failed + preempted time, less what the platform pays for (55); the
--                 platform team's failed_runs is what it pays for
--   network, storage, support, operations = configured amounts, given per team or spread over
--                 teams in proportion to their allocated GPU-hours
--   total       = compute + network + storage + support + idle + failed_runs + operations
--   cost_per_accepted_unit = total / accepted_units (null when no units)
--
-- Idle policy `platform` keeps unallocated cost on the team `platform`; `share` spreads it over
-- teams by allocated GPU-hours (the hours stay `platform`'s). A month with no allocated time
-- leaves every spread amount with `platform`. `lost_gpu_hours_platform_paid` and
-- `lost_cost_platform_paid` say how much of a team's failed and preempted time the platform paid.

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

CREATE OR REPLACE VIEW priced_state_hours AS
SELECT h.*,
       COALESCE(np.price, np2.price, pm.price, s.default_price) AS price,
       h.gpu_hours * COALESCE(np.price, np2.price, pm.price, s.default_price) AS cost,
       COALESCE(np.label_value, np2.label_value) AS pool,
       -- Who pays for lost time (55_who_pays.sql): `platform` or `team`; null for other states.
       CASE WHEN h.state IN ('failed', 'preempted') THEN COALESCE(lp.paid_by, 'team') END AS paid_by
FROM settings s
CROSS JOIN gpu_state_hours h
LEFT JOIN node_prices np ON np.node = h.node
-- The DCGM Hostname may be the node's kubernetes.io/hostname label rather than its name.
LEFT JOIN (SELECT n.hostname_label, MIN(p.price) AS price, MIN(p.label_value) AS label_value
           FROM nodes_latest n JOIN node_prices p ON p.node = n.node
           WHERE n.hostname_label IS NOT NULL AND n.hostname_label <> n.node
           GROUP BY n.hostname_label) np2 ON np.node IS NULL AND np2.hostname_label = h.node
LEFT JOIN price_by_model pm ON pm.model_name = h.model_name
LEFT JOIN lost_segment_payers lp ON lp.namespace = h.namespace AND lp.run = h.run AND lp.segment = h.segment;

-- GPU-hours and price-list cost per month, team and state.
CREATE OR REPLACE VIEW team_month_usage AS
SELECT month, team,
       SUM(CASE WHEN state = 'productive' THEN gpu_hours ELSE 0 END) AS productive_gpu_hours,
       SUM(CASE WHEN state = 'allocated_idle' THEN gpu_hours ELSE 0 END) AS allocated_idle_gpu_hours,
       SUM(CASE WHEN state = 'failed' THEN gpu_hours ELSE 0 END) AS failed_gpu_hours,
       SUM(CASE WHEN state = 'preempted' THEN gpu_hours ELSE 0 END) AS preempted_gpu_hours,
       SUM(CASE WHEN state = 'unallocated' THEN gpu_hours ELSE 0 END) AS unallocated_gpu_hours,
       SUM(CASE WHEN state <> 'unallocated' THEN gpu_hours ELSE 0 END) AS allocated_gpu_hours,
       SUM(CASE WHEN provisional THEN gpu_hours ELSE 0 END) AS provisional_gpu_hours,
       SUM(CASE WHEN state = 'productive' THEN cost ELSE 0 END) AS productive_cost,
       SUM(CASE WHEN state = 'allocated_idle' THEN cost ELSE 0 END) AS allocated_idle_cost,
       SUM(CASE WHEN state IN ('failed', 'preempted') THEN cost ELSE 0 END) AS failed_cost,
       SUM(CASE WHEN state = 'unallocated' THEN cost ELSE 0 END) AS unallocated_cost,
       SUM(CASE WHEN paid_by = 'platform' THEN gpu_hours ELSE 0 END) AS lost_gpu_hours_platform_paid,
       SUM(CASE WHEN paid_by = 'platform' THEN cost ELSE 0 END) AS lost_cost_platform_paid
FROM priced_state_hours
GROUP BY month, team;

-- Each month's allocated GPU-hours (the key for spreading), unallocated cost (what the idle
-- policy hands out) and the lost cost the platform pays for.
CREATE OR REPLACE VIEW month_usage AS
SELECT month, SUM(allocated_gpu_hours) AS allocated_gpu_hours, SUM(unallocated_cost) AS unallocated_cost,
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
);

-- Each team's share of its month's allocated GPU-hours (the key for spreading amounts).
-- With no allocated hours in a month, `platform` takes the whole share.
CREATE OR REPLACE VIEW team_month_shares AS
SELECT t.month, t.team,
       CASE WHEN COALESCE(m.allocated_gpu_hours, 0) > 0
            THEN COALESCE(u.allocated_gpu_hours, 0) / m.allocated_gpu_hours
            WHEN t.team = 'platform' THEN 1.0 ELSE 0.0 END AS share
FROM chargeback_teams t
LEFT JOIN team_month_usage u ON u.month = t.month AND u.team = t.team
LEFT JOIN month_usage m ON m.month = t.month;

-- Overheads per month and component: spread amounts (no team) and direct ones (per team).
CREATE OR REPLACE VIEW overhead_amounts AS
SELECT t.month, t.team,
       SUM(CASE WHEN o.component = 'network' THEN o.amount * CASE WHEN o.team IS NULL THEN t.share ELSE 1 END ELSE 0 END) AS network,
       SUM(CASE WHEN o.component = 'storage' THEN o.amount * CASE WHEN o.team IS NULL THEN t.share ELSE 1 END ELSE 0 END) AS storage,
       SUM(CASE WHEN o.component = 'support' THEN o.amount * CASE WHEN o.team IS NULL THEN t.share ELSE 1 END ELSE 0 END) AS support,
       SUM(CASE WHEN o.component = 'operations' THEN o.amount * CASE WHEN o.team IS NULL THEN t.share ELSE 1 END ELSE 0 END) AS operations
FROM team_month_shares t
JOIN overheads o ON o.month = t.month AND (o.team IS NULL OR o.team = t.team)
GROUP BY t.month, t.team;

CREATE OR REPLACE VIEW chargeback_monthly AS
SELECT month, team, productive_gpu_hours, allocated_idle_gpu_hours, failed_gpu_hours,
       preempted_gpu_hours, unallocated_gpu_hours, compute, network, storage, support, idle,
       failed_runs, operations,
       compute + network + storage + support + idle + failed_runs + operations AS total,
       accepted_units,
       CASE WHEN accepted_units > 0
            THEN (compute + network + storage + support + idle + failed_runs + operations) / accepted_units
       END AS cost_per_accepted_unit,
       provisional_gpu_hours, lost_gpu_hours_platform_paid, lost_cost_platform_paid
FROM (
    SELECT t.month, t.team,
           COALESCE(u.productive_gpu_hours, 0) AS productive_gpu_hours,
           COALESCE(u.allocated_idle_gpu_hours, 0) AS allocated_idle_gpu_hours,
           COALESCE(u.failed_gpu_hours, 0) AS failed_gpu_hours,
           COALESCE(u.preempted_gpu_hours, 0) AS preempted_gpu_hours,
           COALESCE(u.unallocated_gpu_hours, 0) AS unallocated_gpu_hours,
           COALESCE(u.productive_cost, 0) AS compute,
           COALESCE(o.network, 0) AS network,
           COALESCE(o.storage, 0) AS storage,
           COALESCE(o.support, 0) AS support,
           COALESCE(u.allocated_idle_cost, 0)
             + CASE WHEN s.idle_policy = 'share' AND COALESCE(m.allocated_gpu_hours, 0) > 0
                    THEN COALESCE(m.unallocated_cost, 0) * t.share
                    WHEN t.team = 'platform' THEN COALESCE(m.unallocated_cost, 0)
                    ELSE 0 END AS idle,
           COALESCE(u.failed_cost, 0) - COALESCE(u.lost_cost_platform_paid, 0)
             + CASE WHEN t.team = 'platform' THEN COALESCE(m.lost_cost_platform_paid, 0) ELSE 0 END AS failed_runs,
           COALESCE(o.operations, 0) AS operations,
           COALESCE(a.accepted_units, 0) AS accepted_units,
           COALESCE(u.provisional_gpu_hours, 0) AS provisional_gpu_hours,
           COALESCE(u.lost_gpu_hours_platform_paid, 0) AS lost_gpu_hours_platform_paid,
           COALESCE(u.lost_cost_platform_paid, 0) AS lost_cost_platform_paid
    FROM settings s
    CROSS JOIN team_month_shares t
    LEFT JOIN team_month_usage u ON u.month = t.month AND u.team = t.team
    LEFT JOIN month_usage m ON m.month = t.month
    LEFT JOIN overhead_amounts o ON o.month = t.month AND o.team = t.team
    LEFT JOIN (SELECT month, team, SUM(accepted_units) AS accepted_units
               FROM accepted_units_monthly GROUP BY month, team) a ON a.month = t.month AND a.team = t.team
);
