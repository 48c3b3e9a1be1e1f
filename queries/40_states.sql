-- 40  States: every observed GPU-second is productive, allocated_idle, failed, preempted or
-- unallocated, and belongs to one team.
--
--   productive      allocated; its run segment not failed or preempted; GPU active in the sample
--   allocated_idle  allocated; its run segment not failed or preempted; GPU not active
--   failed          allocated to a segment that ended failed, or to a pod that failed while its
--                   segment went on (an attempt the job retried), whatever the activity
--   preempted       allocated to a segment that ended preempted, whatever the activity
--   unallocated     no pod on the GPU (team `platform`)
--
-- Allocated = the sample names a pod (namespace and pod). Active = `pod_samples.active`
-- (30_observations.sql: engine activity, else utilisation, over its threshold). Time of segments
-- still running is `provisional`: it is restated when a later ledger run sees the outcome.
-- Idle time also gets a reason (`startup`, `stall`, `teardown`; `cordoned`, `stranded`,
-- `no_demand`): see gpu_state_pieces below.
-- GPU time is exact: integer GPU-nanoseconds, each piece split by largest remainder among a MIG
-- GPU's instances and leftover and among the pods sharing it, so that the parts add up to the
-- piece and no order of summation changes a sum (mig_piece_parts, gpu_state_piece_states).
-- Energy goes with the time: each span's mean power (32_spans.sql) times its share of the GPU.
--
-- Inputs besides 32: the object tables, `known_active_bounds` (`day_active_bounds` of 30 over
-- every day; the in-process ledger gathers it day by day) and 25_capacity.sql's windows.

-- The covered spans cut at every UTC hour (and so at every midnight and month boundary): piece 0
-- from t up to the first hour boundary after it (or the span's end); a span that reaches into
-- the next hour only (nearly all that cross one: a span is at most max_gap long) has piece 1
-- from there to its end; a span longer than an hour (scrape intervals over 24 minutes) has one
-- piece per later hour it reaches, found in `calendar_hours` (every hour of `calendar_days`).
-- `piece_ns`: the piece's length in nanoseconds (a whole number of milliseconds).
CREATE OR REPLACE VIEW sample_pieces AS
WITH pieces AS (
    SELECT date, hostname, uuid, mig_instance, model_name, namespace, pod, pod_uid, active, xid_error,
           slices, gpu_slices, pods, share_group, watts, t, t AS piece_start, LEAST(covered_end, (t / 3600000 + 1) * 3600000) AS piece_end
    FROM sample_spans
    UNION ALL
    SELECT date, hostname, uuid, mig_instance, model_name, namespace, pod, pod_uid, active, xid_error,
           slices, gpu_slices, pods, share_group, watts, t, (t / 3600000 + 1) * 3600000 AS piece_start, covered_end AS piece_end
    FROM sample_spans
    WHERE covered_end > (t / 3600000 + 1) * 3600000 AND covered_end <= (t / 3600000 + 2) * 3600000
    UNION ALL
    SELECT s.date, s.hostname, s.uuid, s.mig_instance, s.model_name, s.namespace, s.pod, s.pod_uid, s.active, s.xid_error,
           s.slices, s.gpu_slices, s.pods, s.share_group, s.watts, s.t, h.hour_number * 3600000 AS piece_start,
           LEAST(s.covered_end, (h.hour_number + 1) * 3600000) AS piece_end
    FROM sample_spans s
    JOIN calendar_hours h ON h.hour_number > s.t / 3600000 AND h.hour_number * 3600000 < s.covered_end
    WHERE s.covered_end > (s.t / 3600000 + 2) * 3600000
)
SELECT date, hostname, uuid, mig_instance, model_name, namespace, pod, pod_uid, active, xid_error,
       slices, gpu_slices, pods, share_group, watts, t, piece_start, (piece_end - piece_start) * 1000000 AS piece_ns
FROM pieces
WHERE piece_end > piece_start;

-- GPU time is counted in integer GPU-nanoseconds, split so that the parts of a piece add up to
-- the piece exactly, whatever order anything is summed in (docs/accounting.md "Money is exact"). Each
-- split is by largest remainder: every part gets the floor of its exact share, and the
-- nanoseconds the floors leave go one each to the parts with the largest remainders.
--
-- A MIG GPU's piece is split first among its instances (N/M each) and its leftover ((M - sum of
-- N)/M, unallocated); each instance's part is then split among its pods (gpu_state_piece_states).
-- Equal remainders go to the instances in id order, the leftover last. The split is per GPU and
-- instant: every part is counted in units of 1/M ns (an instance's piece x N, the leftover's
-- x (M - sum of N)), so the floors and remainders of all parts compare directly, and the parts
-- add up to the piece. (Instances of one GPU are read in one scrape, so their pieces at an
-- instant are the same; where one's is not, each instance takes N/M of its own piece and the
-- leftover is measured on the piece of the instant's first instance, the total rounded to
-- whole nanoseconds before it is split.) Per-instant totals are aggregates joined back, and the
-- one window (the ranking) sorts, so everything this holds is counted in the memory pool and
-- can spill: under a small memory limit a day's MIG node must fit.
-- An instance one pod holds (or none: nearly every MIG row) keeps its pod here, so that
-- mig_pieces joins back to the pieces only for the instances pods share. The ledger keeps this
-- view as a table as soon as it is created (ledger/src/plan.rs): mig_pieces is read six times.
CREATE OR REPLACE VIEW mig_piece_parts AS
WITH instances AS (
    -- One row per instance piece: an instance held by one pod, or none, is its own row; the k
    -- rows of an instance shared by k pods are made one.
    SELECT date, hostname, uuid, mig_instance, model_name, namespace, pod, pod_uid, active, pods, xid_error, watts,
           slices, gpu_slices, t, piece_start, piece_ns
    FROM sample_pieces
    WHERE mig_instance IS NOT NULL AND pods = 1
    UNION ALL
    SELECT date, hostname, uuid, mig_instance, MIN(model_name), CAST(NULL AS VARCHAR), CAST(NULL AS VARCHAR), CAST(NULL AS VARCHAR),
           false, MIN(pods), MAX(xid_error), MAX(watts), MIN(slices), MIN(gpu_slices), t, piece_start, piece_ns
    FROM sample_pieces
    WHERE mig_instance IS NOT NULL AND pods > 1
    GROUP BY date, hostname, uuid, mig_instance, t, piece_start, piece_ns
),
instant_totals AS (
    -- Per GPU and instant: the slices its instances hold, and its first instance (which
    -- carries the leftover below). An aggregate joined back, not a window over the partition:
    -- a window without ORDER BY holds a whole unit's rows at once, outside the memory pool.
    SELECT hostname, uuid, t, piece_start, SUM(slices) AS held_slices, MIN(mig_instance) AS first_instance
    FROM instances
    GROUP BY hostname, uuid, t, piece_start
),
at_instant AS (
    -- The slices no instance of the GPU holds at the instant.
    SELECT i.*, i.gpu_slices - it.held_slices AS leftover_slices, it.first_instance
    -- The aggregate first: DataFusion builds its hash table from the left side, and the rows
    -- a join emits hold the whole of its build side's string buffers.
    FROM instant_totals it
    JOIN instances i
      ON (it.hostname IS NOT DISTINCT FROM i.hostname) AND (it.uuid IS NOT DISTINCT FROM i.uuid)
     AND (it.t IS NOT DISTINCT FROM i.t) AND (it.piece_start IS NOT DISTINCT FROM i.piece_start)
),
parts AS (
    -- Each instance's part, and the leftover's (none where the instances hold every slice), in
    -- 1/M ns. (The two-row VALUES makes the leftover's row beside the first instance's.)
    SELECT a.date, a.hostname, a.uuid, CASE WHEN k.leftover THEN NULL ELSE a.mig_instance END AS mig_instance,
           a.model_name, a.xid_error, a.watts, a.t, a.piece_start, a.gpu_slices,
           CASE WHEN NOT k.leftover THEN a.namespace END AS namespace, CASE WHEN NOT k.leftover THEN a.pod END AS pod,
           CASE WHEN NOT k.leftover THEN a.pod_uid END AS pod_uid, a.active AND NOT k.leftover AS active,
           CASE WHEN NOT k.leftover THEN a.pods END AS pods,
           a.piece_ns * CASE WHEN k.leftover THEN a.leftover_slices ELSE a.slices END AS share
    FROM (VALUES (false), (true)) AS k(leftover)
    CROSS JOIN at_instant a
    WHERE NOT k.leftover OR (a.mig_instance = a.first_instance AND a.leftover_slices > 0)
),
floors AS (
    SELECT *, share / gpu_slices AS floor_ns, share % gpu_slices AS remainder FROM parts
),
floor_totals AS (
    -- Per GPU and instant: the whole, in 1/M ns, and the sum of the parts' floors.
    SELECT hostname, uuid, t, piece_start, SUM(share) AS total_share, SUM(floor_ns) AS total_floor_ns
    FROM floors
    GROUP BY hostname, uuid, t, piece_start
)
SELECT f.date, f.hostname, f.uuid, f.mig_instance, f.model_name, f.namespace, f.pod, f.pod_uid, f.active, f.pods,
       f.xid_error, f.watts, f.t, f.piece_start,
       -- The instant's whole (the piece, in the usual case), less the floors: the nanoseconds
       -- left, one each to the largest remainders.
       f.floor_ns + CASE WHEN ROW_NUMBER() OVER (PARTITION BY f.hostname, f.uuid, f.t, f.piece_start
                                                 ORDER BY f.remainder DESC, f.mig_instance NULLS LAST)
                              <= (ft.total_share + f.gpu_slices / 2) / f.gpu_slices - ft.total_floor_ns
                         THEN 1 ELSE 0 END AS part_ns
FROM floor_totals ft
JOIN floors f
  ON (ft.hostname IS NOT DISTINCT FROM f.hostname) AND (ft.uuid IS NOT DISTINCT FROM f.uuid)
 AND (ft.t IS NOT DISTINCT FROM f.t) AND (ft.piece_start IS NOT DISTINCT FROM f.piece_start);

-- The Node each DCGM Hostname names: an exact match (without case) first, else by first DNS
-- label; the alphabetically first node where two match equally. A hostname no node matches
-- stays as it is.
CREATE OR REPLACE VIEW hostname_nodes AS
SELECT hostname, node FROM (
    SELECT h.hostname, k.node,
           ROW_NUMBER() OVER (PARTITION BY h.hostname ORDER BY k.exact DESC, k.node) AS match_rank
    FROM (SELECT DISTINCT hostname FROM sample_spans WHERE hostname IS NOT NULL) h
    JOIN node_keys k ON k.key = lower(h.hostname) OR (NOT k.exact AND k.key = split_part(lower(h.hostname), '.', 1))
) WHERE match_rank = 1;

-- A MIG GPU's pieces as its pods hold them: an instance one pod holds (or none) is its part
-- (mig_piece_parts); the part of an instance k pods share goes to them, the floor of 1/k each
-- and the nanoseconds left one each to the pods with the smallest uid (as for a whole GPU,
-- below); and the leftover, which no pod holds.
CREATE OR REPLACE VIEW mig_pieces AS
SELECT date, hostname, uuid, mig_instance, model_name, namespace, pod, pod_uid, active, xid_error, watts, t, piece_start,
       part_ns AS gpu_ns
FROM mig_piece_parts
WHERE mig_instance IS NOT NULL AND pods = 1
UNION ALL
SELECT sp.date, sp.hostname, sp.uuid, sp.mig_instance, sp.model_name, sp.namespace, sp.pod, sp.pod_uid, sp.active,
       sp.xid_error, sp.watts, sp.t, sp.piece_start,
       mp.part_ns / sp.pods
       + CASE WHEN ROW_NUMBER() OVER (PARTITION BY sp.hostname, sp.uuid, sp.mig_instance, sp.t, sp.piece_start
                                      ORDER BY COALESCE(sp.pod_uid, sp.namespace || '/' || sp.pod), sp.namespace, sp.pod)
                   <= mp.part_ns % sp.pods THEN 1 ELSE 0 END AS gpu_ns
FROM sample_pieces sp
JOIN mig_piece_parts mp
  ON (mp.hostname IS NOT DISTINCT FROM sp.hostname) AND (mp.uuid IS NOT DISTINCT FROM sp.uuid)
 AND (mp.mig_instance IS NOT DISTINCT FROM sp.mig_instance) AND (mp.t IS NOT DISTINCT FROM sp.t)
 AND (mp.piece_start IS NOT DISTINCT FROM sp.piece_start)
-- Said, not only implied by the join: only the shared instances' pieces (few) are joined.
WHERE sp.mig_instance IS NOT NULL AND sp.pods > 1 AND mp.pods > 1
UNION ALL
SELECT date, hostname, uuid, CAST(NULL AS INT), model_name, CAST(NULL AS VARCHAR), CAST(NULL AS VARCHAR), CAST(NULL AS VARCHAR),
       false, xid_error, watts, t, piece_start, part_ns
FROM mig_piece_parts
WHERE mig_instance IS NULL;

-- Shared GPUs (docs/accounting.md "Allocation", "DRA", "Measured sharing"): an observation of a
-- whole GPU that k rows hold is split first among its share groups (32_spans.sql: each pod its
-- own group, or the pods of one DRA claim one group), then each group's part 1/k among its pods.
-- A group's weight (`group_weight` of `total_weight`):
--   capacity  where the groups are claims (a device several claims share) and every one declares
--             the `dra_capacity_key` capacity: in proportion to it;
--   measured  with `sharing = 'measured'`, no claim groups, and some utilisation: in proportion to
--             each pod's DCGM_FI_DEV_GPU_UTIL (a missing value is 0);
--   even      otherwise: its pods' count, so that every pod holds 1/k of the observation.
-- Proportional weights are made integer millionths by largest remainder (ties: the smaller
-- group, a pod's uid), so that the weights are exact whatever order anything is summed in.
-- One row per shared observation and group; only shared observations (few) come here.
CREATE OR REPLACE VIEW span_shares AS
WITH groups AS (
    SELECT hostname, uuid, t, share_group, COUNT(*) AS group_pods,
           MAX(CASE WHEN share_group LIKE 'claim %' THEN 1 ELSE 0 END) AS is_claim,
           MIN(claim_capacity) AS capacity,
           SUM(CAST(ROUND(COALESCE(gpu_util, 0) * 1000) AS BIGINT)) AS util_milli
    FROM sample_spans
    WHERE pods > 1 AND mig_instance IS NULL
    GROUP BY hostname, uuid, t, share_group
),
instants AS (
    SELECT hostname, uuid, t, COUNT(*) AS group_count, SUM(group_pods) AS pods_total, SUM(is_claim) AS claim_groups,
           SUM(CASE WHEN capacity > 0 THEN 1 ELSE 0 END) AS sized_groups,
           SUM(CASE WHEN capacity > 0 THEN capacity ELSE 0 END) AS capacity_total, SUM(util_milli) AS util_total
    FROM groups
    GROUP BY hostname, uuid, t
),
weighed AS (
    SELECT g.hostname, g.uuid, g.t, g.share_group, g.group_pods, i.pods_total,
           CASE WHEN i.claim_groups > 0 AND i.sized_groups = i.group_count THEN g.capacity
                WHEN i.claim_groups = 0 AND s.sharing = 'measured' AND i.util_total > 0 THEN g.util_milli END AS w,
           CASE WHEN i.claim_groups > 0 AND i.sized_groups = i.group_count THEN i.capacity_total
                WHEN i.claim_groups = 0 AND s.sharing = 'measured' AND i.util_total > 0 THEN i.util_total END AS w_total
    FROM settings s
    CROSS JOIN instants i
    JOIN groups g ON (g.hostname IS NOT DISTINCT FROM i.hostname) AND (g.uuid IS NOT DISTINCT FROM i.uuid) AND g.t = i.t
),
millionths AS (
    SELECT *, 1000000 * w / w_total AS floor_ppm, 1000000 * w % w_total AS remainder,
           SUM(1000000 * w / w_total) OVER (PARTITION BY hostname, uuid, t) AS floor_total
    FROM weighed
    WHERE w_total IS NOT NULL
)
SELECT hostname, uuid, t, share_group, group_pods,
       floor_ppm + CASE WHEN ROW_NUMBER() OVER (PARTITION BY hostname, uuid, t ORDER BY remainder DESC, share_group)
                             <= 1000000 - floor_total THEN 1 ELSE 0 END AS group_weight,
       CAST(1000000 AS BIGINT) AS total_weight
FROM millionths
UNION ALL
SELECT hostname, uuid, t, share_group, group_pods, group_pods AS group_weight, pods_total AS total_weight
FROM weighed
WHERE w_total IS NULL;

-- Each shared whole-GPU piece's part per share group: the floor of its weight's share of the
-- piece, and the nanoseconds the floors leave one each to the largest remainders (ties: the
-- smaller group).
CREATE OR REPLACE VIEW shared_group_pieces AS
WITH pieces AS (
    SELECT DISTINCT p.hostname, p.uuid, p.t, p.piece_start, p.piece_ns, p.share_group, w.group_weight, w.total_weight, w.group_pods
    FROM sample_pieces p
    JOIN span_shares w
      ON (w.hostname IS NOT DISTINCT FROM p.hostname) AND (w.uuid IS NOT DISTINCT FROM p.uuid) AND w.t = p.t
     AND w.share_group = p.share_group
    WHERE p.mig_instance IS NULL AND p.pods > 1
),
floors AS (
    SELECT *, piece_ns * group_weight / total_weight AS floor_ns, piece_ns * group_weight % total_weight AS remainder,
           SUM(piece_ns * group_weight / total_weight) OVER (PARTITION BY hostname, uuid, t, piece_start) AS floor_total
    FROM pieces
)
SELECT hostname, uuid, t, piece_start, share_group, group_pods,
       floor_ns + CASE WHEN ROW_NUMBER() OVER (PARTITION BY hostname, uuid, t, piece_start ORDER BY remainder DESC, share_group)
                            <= piece_ns - floor_total THEN 1 ELSE 0 END AS group_ns
FROM floors;

-- Each piece with its state, run, team and GPU-nanoseconds. A pod the Kubernetes capture does
-- not know is its own run with an unknown (so provisional) outcome, its team taken from its
-- namespace. A whole GPU's piece goes to the k pods the observation names, by their share
-- groups' weights (span_shares, shared_group_pieces), ties to the smallest uid (the exporter's
-- `pod_uid`, else namespace/name: the split is made before the sample is matched to a pod
-- incarnation, so that the match, a join with every pod, runs once). A MIG GPU's pieces come
-- split already (mig_pieces), its leftover as a piece no pod holds: unallocated. `mig`: the
-- piece is of a GPU in MIG mode.
-- Energy goes with the time: the span's mean power (W) x its nanoseconds / 10^6 = mJ.
CREATE OR REPLACE VIEW gpu_state_piece_states AS
WITH split AS (
    -- One pod (nearly every row): it holds the whole piece. k pods: their share group's part
    -- (shared_group_pieces), the floor of 1/k of it each to the group's pods and the
    -- nanoseconds left one each to the first by uid. The windows sort only the shared rows.
    SELECT date, hostname, uuid, mig_instance, false AS mig, model_name, namespace, pod, pod_uid, active, xid_error, watts,
           t, piece_start, piece_ns AS gpu_ns
    FROM sample_pieces
    WHERE mig_instance IS NULL AND pods = 1
    UNION ALL
    SELECT p.date, p.hostname, p.uuid, p.mig_instance, false AS mig, p.model_name, p.namespace, p.pod, p.pod_uid, p.active,
           p.xid_error, p.watts, p.t, p.piece_start,
           g.group_ns / g.group_pods
           + CASE WHEN ROW_NUMBER() OVER (PARTITION BY p.hostname, p.uuid, p.t, p.piece_start, p.share_group
                                          ORDER BY COALESCE(p.pod_uid, p.namespace || '/' || p.pod), p.namespace, p.pod)
                       <= g.group_ns % g.group_pods THEN 1 ELSE 0 END AS gpu_ns
    FROM sample_pieces p
    JOIN shared_group_pieces g
      ON (g.hostname IS NOT DISTINCT FROM p.hostname) AND (g.uuid IS NOT DISTINCT FROM p.uuid) AND g.t = p.t
     AND g.piece_start = p.piece_start AND g.share_group = p.share_group
    WHERE p.mig_instance IS NULL AND p.pods > 1
    UNION ALL
    SELECT date, hostname, uuid, mig_instance, true AS mig, model_name, namespace, pod, pod_uid, active, xid_error, watts,
           t, piece_start, gpu_ns
    FROM mig_pieces
),
resolved AS (
    SELECT s.date, s.hostname, COALESCE(hn.node, s.hostname) AS node, s.uuid, s.mig_instance, s.mig, s.model_name,
           s.t, s.piece_start, s.xid_error, s.namespace, s.pod, s.active, s.watts, s.gpu_ns,
           r.pod_key AS run_pod_key, r.team AS run_team, n.team_label, r.run AS run_name, r.segment AS run_segment,
           r.outcome AS run_outcome, r.pod_failed
    FROM split s
    -- A name may have several incarnations: the sample's pod_uid picks one where the exporter
    -- writes it (and the capture knows the pod's uid), else the sample's time.
    LEFT JOIN pod_runs r ON r.namespace = s.namespace AND r.pod = s.pod
                        AND CASE WHEN s.pod_uid IS NOT NULL AND r.uid IS NOT NULL THEN r.uid = s.pod_uid
                                 ELSE s.t >= r.valid_from_ms AND (r.valid_to_ms IS NULL OR s.t < r.valid_to_ms) END
    LEFT JOIN namespaces_latest n ON n.namespace = s.namespace
    LEFT JOIN hostname_nodes hn ON hn.hostname = s.hostname
)
SELECT date, hostname, node, uuid, mig_instance, mig, model_name, t, piece_start, xid_error,
       CASE WHEN pod IS NOT NULL AND namespace IS NOT NULL THEN COALESCE(run_pod_key, namespace || '/' || pod) END AS pod_key,
       -- (As VARCHAR: the tables declare team so, whatever type the sources' strings have.)
       CAST(CASE WHEN pod IS NULL OR namespace IS NULL THEN 'platform'
                 ELSE COALESCE(run_team, team_label, namespace) END AS VARCHAR) AS team,
       CASE WHEN pod IS NOT NULL AND namespace IS NOT NULL THEN namespace END AS namespace,
       CASE WHEN pod IS NOT NULL AND namespace IS NOT NULL THEN COALESCE(run_name, 'pod/' || pod) END AS run,
       CASE WHEN pod IS NOT NULL AND namespace IS NOT NULL THEN COALESCE(run_segment, 1) END AS segment,
       CASE WHEN pod IS NOT NULL AND namespace IS NOT NULL THEN COALESCE(run_outcome, 'unknown') END AS outcome,
       CASE
           WHEN pod IS NULL OR namespace IS NULL THEN 'unallocated'
           WHEN run_outcome = 'failed' THEN 'failed'
           WHEN run_outcome = 'preempted' THEN 'preempted'
           WHEN pod_failed THEN 'failed'
           WHEN active THEN 'productive'
           ELSE 'allocated_idle'
       END AS state,
       gpu_ns,
       -- mJ; null where nothing was measured.
       watts * gpu_ns / 1000000.0 AS energy_mj
FROM resolved;

-- Each pod incarnation's first and last active observation on each GPU over all days
-- (`known_active_bounds` is `day_active_bounds` of 30_observations.sql over every day).
CREATE OR REPLACE VIEW pod_active_bounds AS
SELECT hostname, uuid, mig_instance, pod_key,
       MIN(first_active_t) AS first_active_t, MAX(last_active_t) AS last_active_t
FROM known_active_bounds
GROUP BY hostname, uuid, mig_instance, pod_key;

-- Unallocated pieces, each with whether its node was in a cordon window (25_capacity.sql:
-- node_unavailable) or a stranding window (stranding_windows) at the piece's time t. A sweep per
-- node over the windows' edges and the pieces in time order: a window opens (+1) at from_ms and
-- closes (-1) at to_ms; at one instant the edges come first, so a piece at from_ms is inside and
-- one at to_ms outside. (A sweep, not an outer join against the windows: Ballista 55 cannot run
-- that join, and the sweep sorts only the unallocated pieces.)
CREATE OR REPLACE VIEW unallocated_piece_windows AS
SELECT date, node, uuid, mig, model_name, t, piece_start, xid_error, gpu_ns, energy_mj,
       cordons > 0 AS cordoned, strandings > 0 AS stranded
FROM (
    SELECT *,
           SUM(cordon_step) OVER (PARTITION BY node ORDER BY t, is_piece ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW) AS cordons,
           SUM(strand_step) OVER (PARTITION BY node ORDER BY t, is_piece ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW) AS strandings
    FROM (
        SELECT date, node, uuid, mig, model_name, t, piece_start, xid_error, gpu_ns, energy_mj,
               1 AS is_piece, 0 AS cordon_step, 0 AS strand_step
        FROM gpu_state_piece_states
        WHERE state = 'unallocated'
        UNION ALL
        -- The edges; their piece columns are placeholders (the edges are dropped after the sweep).
        SELECT '', node, '', false, '', edge_ms, 0, 0, 0, 0.0, 0, cordon_step, strand_step
        FROM (
            SELECT node, from_ms AS edge_ms, 1 AS cordon_step, 0 AS strand_step FROM node_unavailable
            UNION ALL SELECT node, to_ms, -1, 0 FROM node_unavailable
            UNION ALL SELECT node, from_ms, 0, 1 FROM stranding_windows
            UNION ALL SELECT node, to_ms, 0, -1 FROM stranding_windows
        )
    )
)
WHERE is_piece = 1;

-- Why idle time was idle (docs/accounting.md "Why GPUs were idle"), decided at the observation's time t:
--   allocated_idle  startup   before the pod's first active observation on that GPU (a pod never
--                             active there: all of it)
--                   teardown  after its last one
--                   stall     in between
--   unallocated     cordoned  the node could take no pod (25_capacity.sql: node_unavailable)
--                   stranded  a GPU Workload waited for quota that could have used this node
--                             (stranding_windows); whole GPUs only: a Workload asking for
--                             nvidia.com/gpu cannot use a MIG instance or a MIG GPU's leftover
--                   no_demand neither
-- Other states have no reason (null).
CREATE OR REPLACE VIEW gpu_state_pieces AS
SELECT p.date, p.node, p.uuid, p.model_name, p.piece_start, p.xid_error, p.team, p.namespace, p.run,
       p.segment, p.outcome, p.state,
       CASE
           WHEN p.state = 'allocated_idle' THEN
               CASE WHEN b.first_active_t IS NULL OR p.t < b.first_active_t THEN 'startup'
                    WHEN p.t > b.last_active_t THEN 'teardown'
                    ELSE 'stall' END
       END AS reason,
       p.gpu_ns, p.energy_mj
FROM gpu_state_piece_states p
LEFT JOIN pod_active_bounds b
       ON p.state = 'allocated_idle' AND (b.hostname IS NOT DISTINCT FROM p.hostname) AND (b.uuid IS NOT DISTINCT FROM p.uuid)
      AND (b.mig_instance IS NOT DISTINCT FROM p.mig_instance) AND (b.pod_key IS NOT DISTINCT FROM p.pod_key)
WHERE p.state <> 'unallocated'
UNION ALL
SELECT date, node, uuid, model_name, piece_start, xid_error, 'platform' AS team, CAST(NULL AS VARCHAR) AS namespace,
       CAST(NULL AS VARCHAR) AS run, CAST(NULL AS BIGINT) AS segment, CAST(NULL AS VARCHAR) AS outcome, 'unallocated' AS state,
       CASE WHEN cordoned THEN 'cordoned'
            WHEN stranded AND NOT mig THEN 'stranded'
            ELSE 'no_demand' END AS reason,
       gpu_ns, energy_mj
FROM unallocated_piece_windows;

-- The pod incarnations a sample names: they held a GPU (only GPU runs accept units).
CREATE OR REPLACE VIEW gpu_pods AS
SELECT DISTINCT r.pod_key
FROM sample_spans sp
JOIN pod_runs r ON r.namespace = sp.namespace AND r.pod = sp.pod
               AND CASE WHEN sp.pod_uid IS NOT NULL AND r.uid IS NOT NULL THEN r.uid = sp.pod_uid
                        ELSE sp.t >= r.valid_from_ms AND (r.valid_to_ms IS NULL OR sp.t < r.valid_to_ms) END;

-- The GPUs (and their nodes) each failed or preempted segment held: where to look for the
-- hardware faults that make a lost run the platform's (55_who_pays.sql).
CREATE OR REPLACE VIEW lost_segment_gpus AS
SELECT DISTINCT namespace, run, segment, node, uuid
FROM gpu_state_piece_states
WHERE state IN ('failed', 'preempted');

-- GPU-hours by UTC hour, GPU, team, run segment, state and reason: the ledger's base table.
-- Days and months are sums of hours. `date` is the day of the samples (the store partition they
-- came from); `hour` (RFC 3339, `2026-10-01T13:00:00Z`), `day` and `month` are where the time
-- itself falls (they differ from `date` for the piece of a span after midnight).
-- `gpu_ns` is the exact figure, a sum of integers: every coarser GPU-hour figure (chargeback,
-- reports) sums `gpu_ns` and converts to hours once, at the end. `gpu_hours` is this row's
-- `gpu_ns` in hours (3.6e12 ns), for reading; never sum it where the sum must be exact.
CREATE OR REPLACE VIEW gpu_state_hours AS
SELECT date,
       to_char(to_timestamp_millis(hour_number * 3600000), '%Y-%m-%dT%H:00:00Z') AS hour,
       to_char(to_timestamp_millis(hour_number * 3600000), '%Y-%m-%d') AS day,
       to_char(to_timestamp_millis(hour_number * 3600000), '%Y-%m') AS month,
       node, uuid, model_name, team, namespace, run, segment, outcome, state, reason,
       outcome IN ('running', 'unknown') AS provisional,
       gpu_ns,
       gpu_ns / 3600000000000.0 AS gpu_hours,
       -- kWh = mJ / 3.6e9; null where no piece of the group had a power reading or counter.
       -- Energy is a measurement, not money: a float, summed in whatever order.
       energy_mj / 3600000000.0 AS energy_kwh,
       xid_error
FROM (
    SELECT date, piece_start / 3600000 AS hour_number, node, uuid, model_name, team, namespace, run, segment,
           outcome, state, reason, SUM(gpu_ns) AS gpu_ns, SUM(energy_mj) AS energy_mj,
           MAX(CASE WHEN xid_error > 0 THEN xid_error END) AS xid_error
    FROM gpu_state_pieces
    GROUP BY date, piece_start / 3600000, node, uuid, model_name, team, namespace, run, segment, outcome, state, reason
);

-- Time no observation covered (the rest of gaps longer than max_gap), whole GPUs, by day and
-- node, split at every UTC midnight however long the gap. Not a state: it is reported beside the
-- ledger, never charged.
CREATE OR REPLACE VIEW unobserved_gpu_hours AS
SELECT date, to_char(to_timestamp_millis(day_number * 86400000), '%Y-%m') AS month,
       node, model_name, gpu_ms / 3600000.0 AS gpu_hours,
       to_char(to_timestamp_millis(day_number * 86400000), '%Y-%m-%d') AS day
FROM (
    SELECT date, day_number, node, model_name,
           SUM(LEAST(gap_end, (day_number + 1) * 86400000) - GREATEST(gap_start, day_number * 86400000)) AS gpu_ms
    FROM (
        -- One row per GPU and instant (MIG instances of one GPU share its gap), and per day the
        -- gap touches (calendar_days: every day of the data, from the ledger).
        SELECT g.*, c.day_number
        FROM (
            SELECT sp.date, COALESCE(hn.node, sp.hostname) AS node, sp.uuid, sp.model_name, sp.t,
                   MAX(sp.covered_end) AS gap_start, MAX(sp.covered_end + sp.unobserved_ms) AS gap_end
            FROM sample_spans sp
            LEFT JOIN hostname_nodes hn ON hn.hostname = sp.hostname
            WHERE sp.unobserved_ms > 0
            GROUP BY sp.date, COALESCE(hn.node, sp.hostname), sp.uuid, sp.model_name, sp.t
        ) g
        JOIN calendar_days c ON c.day_number >= g.gap_start / 86400000 AND c.day_number <= (g.gap_end - 1) / 86400000
    )
    GROUP BY date, day_number, node, model_name
);

-- The first and the last instant the samples cover (one row per day in process, one in all
-- at once). Budgets scale a month's cost to date by the part of the month the data covers.
CREATE OR REPLACE VIEW observed_extent AS
SELECT MIN(t) AS first_ms, MAX(covered_end) AS last_ms FROM sample_spans;
