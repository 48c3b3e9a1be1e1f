-- 30  Observed time: the span of GPU time each observation of a GPU covers.
--
-- Observation: the samples of one GPU (or MIG instance) less than 1000 ms after its previous
-- sample are one observation of it (a capture read twice, a /federate file overlapping a scrape
-- file, two exporters' copies). The earliest sample speaks for the observation: its field values
-- and the pods it names. (DESIGN.md measures the 1000 ms from an observation's first sample; the
-- two readings differ only for exporters scraped faster than once a second.)
--
-- Allocation: an observation naming k distinct pods of one GPU (time-slicing, MPS: the exporter
-- repeats the GPU's series once per pod) gives each pod 1/k of the span (`pods` = k).
--
-- Span: an observation at t covers [t, t_next), t_next being the GPU's next observation. The
-- scrape interval is the median spacing of the GPU's observations that start in the calendar
-- month (UTC); a gap longer than max_gap_factor x interval ends the covered span at t + interval,
-- and the rest of the gap is unobserved. The last observation covers one interval. A GPU with
-- no spacing in the month uses 30 s, the exporter's default. Times are milliseconds since the
-- epoch.
--
-- A MIG instance with profile Ng.* (3g.40gb) weighs N sevenths of its GPU; a whole GPU weighs 7.
-- What a MIG GPU's instances leave over (7 minus their sevenths) is the parent GPU's own time.
--
-- In a CROSS JOIN the small table comes first: DataFusion holds the left side in memory.

-- One row per GPU, instant and pod (several containers of one pod, or a row stored twice, are
-- one holder of the GPU).
CREATE OR REPLACE VIEW pod_samples AS
SELECT date, hostname, uuid, mig_instance, epoch_ms(ts) AS t, namespace, pod,
       MIN(model_name) AS model_name, MAX(engine_active) AS engine_active, MAX(gpu_util) AS gpu_util,
       MAX(xid_error) AS xid_error, MIN(COALESCE(mig_sevenths(mig_profile), 7)) AS sevenths
FROM gpu_samples
GROUP BY date, hostname, uuid, mig_instance, epoch_ms(ts), namespace, pod;

-- The instants that start an observation, with the next one and how many pods held the GPU.
CREATE OR REPLACE VIEW observations AS
SELECT hostname, uuid, mig_instance, t, pods,
       LEAD(t) OVER (PARTITION BY hostname, uuid, mig_instance ORDER BY t) AS t_next
FROM (
    SELECT *, LAG(t) OVER (PARTITION BY hostname, uuid, mig_instance ORDER BY t) AS t_prev
    FROM (SELECT hostname, uuid, mig_instance, t, COUNT(*) AS pods
          FROM pod_samples GROUP BY hostname, uuid, mig_instance, t)
)
WHERE t_prev IS NULL OR t - t_prev >= 1000;

-- The scrape interval of each GPU and month: the median spacing of its observations.
CREATE OR REPLACE VIEW scrape_intervals AS
SELECT hostname, uuid, mig_instance, t / 86400000 AS day_number, t, t_next, pods,
       COALESCE(MEDIAN(t_next - t) OVER (PARTITION BY hostname, uuid, mig_instance,
                                                      to_char(to_timestamp_millis(t), '%Y-%m')), 30000) AS interval_ms
FROM observations;

CREATE OR REPLACE VIEW sample_spans AS
SELECT date, hostname, uuid, mig_instance, model_name, namespace, pod, engine_active, gpu_util, xid_error,
       sevenths, pods, t, covered_end,
       -- The part of a long gap not covered (0 when the next observation came in time).
       CASE WHEN t_next IS NOT NULL AND t_next > covered_end THEN t_next - covered_end ELSE 0 END AS unobserved_ms
FROM (
    SELECT p.*, o.t_next, o.pods,
           CASE WHEN o.t_next IS NOT NULL AND o.t_next - o.t <= s.max_gap_factor * o.interval_ms THEN o.t_next
                ELSE o.t + o.interval_ms END AS covered_end
    FROM settings s
    CROSS JOIN scrape_intervals o
    JOIN pod_samples p
      -- IS NOT DISTINCT FROM: a sample without a Hostname, UUID or MIG instance still joins.
      ON (p.hostname IS NOT DISTINCT FROM o.hostname) AND (p.uuid IS NOT DISTINCT FROM o.uuid)
     AND (p.mig_instance IS NOT DISTINCT FROM o.mig_instance) AND (p.t IS NOT DISTINCT FROM o.t)
);
