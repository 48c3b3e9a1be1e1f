-- 32  Observed time: the span of GPU time each observation of a GPU covers.
--
-- An observation at t covers [t, t_next), t_next being the GPU's next observation (31). A gap
-- longer than max_gap_factor x the month's scrape interval ends the covered span at t + interval,
-- and the rest of the gap is unobserved, however long. The last observation covers one interval.
--
-- Allocation: an observation naming k distinct pods of one GPU (time-slicing, MPS: the exporter
-- repeats the GPU's series once per pod) gives each pod 1/k of the span (`pods` = k); the pods
-- and values are those of the observation's earliest sample.
--
-- A MIG instance with profile Ng.* (3g.40gb) holds N of its GPU's M compute slices (`slices` of
-- `gpu_slices`: M = 7, 4 on an A30); a whole GPU holds all M. What a MIG GPU's instances leave
-- over (M minus their slices) is the parent GPU's own time. 40_states.sql splits the spans into
-- integer GPU-nanoseconds.
--
-- Input besides 30 and 31: `spacing_counts` (31) over the whole month; the in-process ledger
-- gathers it day by day before it computes any span.
--
-- In a CROSS JOIN the small table comes first: DataFusion holds the left side in memory.

-- The median spacing per GPU and month, read off the running count of the sorted spacings:
-- with n spacings the middle ranks are (n + 1) / 2 and n / 2 + 1 (integer division; the same
-- rank when n is odd).
CREATE OR REPLACE VIEW scrape_intervals AS
SELECT hostname, uuid, mig_instance, month,
       (MIN(CASE WHEN upto >= (total + 1) / 2 THEN spacing_ms END)
        + MIN(CASE WHEN upto >= total / 2 + 1 THEN spacing_ms END)) / 2.0 AS interval_ms
FROM (
    SELECT *, SUM(spacings) OVER (PARTITION BY hostname, uuid, mig_instance, month ORDER BY spacing_ms
                                  ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW) AS upto,
              SUM(spacings) OVER (PARTITION BY hostname, uuid, mig_instance, month) AS total
    FROM (SELECT hostname, uuid, mig_instance, month, spacing_ms, SUM(spacings) AS spacings
          FROM spacing_counts GROUP BY hostname, uuid, mig_instance, month, spacing_ms)
)
GROUP BY hostname, uuid, mig_instance, month;

-- Each observation with its month's scrape interval.
CREATE OR REPLACE VIEW observations AS
SELECT o.hostname, o.uuid, o.mig_instance, o.t, o.t_next, o.pods, o.per_process, o.energy_mj, o.energy_next, o.power_w,
       COALESCE(i.interval_ms, 30000.0) AS interval_ms
FROM observation_next o
LEFT JOIN scrape_intervals i
  ON (i.hostname IS NOT DISTINCT FROM o.hostname) AND (i.uuid IS NOT DISTINCT FROM o.uuid)
 AND (i.mig_instance IS NOT DISTINCT FROM o.mig_instance)
 AND (i.month IS NOT DISTINCT FROM to_char(to_timestamp_millis(o.t), '%Y-%m'));

-- `share_group`: who a shared GPU's observation is split among first (40_states.sql): the
-- claim a pod-less DRA sample was attributed through (its pods share the claim's part), else
-- the pod itself (its uid, else namespace/name). `gpu_util` and `claim_capacity` weigh the
-- groups. With per-process values the pod-less device row holds no share and each pod is
-- active by its own utilisation (30_observations.sql `observation_starts`).
CREATE OR REPLACE VIEW sample_spans AS
SELECT date, hostname, uuid, mig_instance, model_name, namespace, pod, pod_uid, active, xid_error,
       slices, gpu_slices, pods, t, covered_end,
       CASE WHEN pods > 1 THEN COALESCE('claim ' || via_claim, COALESCE(pod_uid, namespace || '/' || pod), '') END AS share_group,
       gpu_util, claim_capacity,
       -- The part of a long gap not covered (0 when the next observation came in time).
       CASE WHEN t_next IS NOT NULL AND t_next > covered_end THEN t_next - covered_end ELSE 0 END AS unobserved_ms,
       watts
FROM (
    SELECT p.date, p.hostname, p.uuid, p.mig_instance, p.model_name, p.namespace, p.pod, p.pod_uid, p.xid_error,
           p.slices, p.gpu_slices, p.t, p.gpu_util, p.via_claim, p.claim_capacity,
           CASE WHEN o.per_process THEN COALESCE(p.gpu_util, 0) >= s.active_threshold_util ELSE p.active END AS active,
           o.t_next, o.pods,
           CAST(CASE WHEN o.t_next IS NOT NULL AND o.t_next - o.t <= s.max_gap_factor * o.interval_ms THEN o.t_next
                     ELSE o.t + o.interval_ms END AS BIGINT) AS covered_end,
           -- The GPU's mean power over the covered span, in W (= mJ per ms): the energy
           -- counter's increase to the next observation where that came within max_gap (a
           -- decrease is a reset: the counter started again from 0, so its new value is the
           -- increase), else the power reading (a gap, the last observation, no counter).
           CASE WHEN o.t_next IS NOT NULL AND o.t_next - o.t <= s.max_gap_factor * o.interval_ms
                     AND o.energy_mj IS NOT NULL AND o.energy_next IS NOT NULL
                THEN CAST(CASE WHEN o.energy_next >= o.energy_mj THEN o.energy_next - o.energy_mj ELSE o.energy_next END AS DOUBLE)
                     / (o.t_next - o.t)
                ELSE o.power_w END AS watts
    FROM settings s
    CROSS JOIN observations o
    -- IS NOT DISTINCT FROM: a sample without a Hostname, UUID or MIG instance still joins.
    JOIN pod_samples p
      ON (p.hostname IS NOT DISTINCT FROM o.hostname) AND (p.uuid IS NOT DISTINCT FROM o.uuid)
     AND (p.mig_instance IS NOT DISTINCT FROM o.mig_instance) AND (p.t IS NOT DISTINCT FROM o.t)
    WHERE NOT (o.per_process AND p.pod IS NULL AND p.claim IS NULL)
);

-- XID errors: the readings whose code is not 0 and differs from the GPU's reading before it
-- (the previous one at hand, else the GPU's last reading of the latest earlier day it was read:
-- `known_day_last_xids`, which is `day_last_xids` over every day). A GPU's first reading in the
-- data is not an error: the code may date from long before.
CREATE OR REPLACE VIEW xid_errors AS
SELECT r.hostname, r.uuid, r.t, r.day_number, r.xid
FROM (
    SELECT *, LAG(xid) OVER (PARTITION BY hostname, uuid ORDER BY t) AS xid_before
    FROM xid_readings
) r
LEFT JOIN (
    SELECT hostname, uuid, day_number,
           LAG(xid) OVER (PARTITION BY hostname, uuid ORDER BY day_number) AS last_xid_before
    FROM known_day_last_xids
) k ON r.xid_before IS NULL AND (k.hostname IS NOT DISTINCT FROM r.hostname)
   AND (k.uuid IS NOT DISTINCT FROM r.uuid) AND (k.day_number IS NOT DISTINCT FROM r.day_number)
WHERE r.xid <> 0 AND COALESCE(r.xid_before, k.last_xid_before) IS NOT NULL
  AND r.xid <> COALESCE(r.xid_before, k.last_xid_before);
