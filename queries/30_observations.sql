-- 30  Observations: when each GPU was seen.
--
-- Observation: the samples of one GPU (or MIG instance) less than 1000 ms after its previous
-- sample are one observation of it (a capture read twice, a /federate file overlapping a scrape
-- file). The earliest sample speaks for the observation: its field values and the pods it names
-- (32_spans.sql). DESIGN.md measures the 1000 ms from an observation's first sample; the two
-- readings differ only for exporters scraped faster than once a second.
--
-- Times are milliseconds since the epoch; `day_number` counts UTC days since the epoch.

-- One row per GPU, instant and pod (several containers of one pod, or a row stored twice, are
-- one holder of the GPU).
CREATE OR REPLACE VIEW pod_samples AS
SELECT date, hostname, uuid, mig_instance, epoch_ms(ts) AS t, namespace, pod,
       MIN(model_name) AS model_name, MAX(engine_active) AS engine_active, MAX(gpu_util) AS gpu_util,
       MAX(xid_error) AS xid_error, MIN(COALESCE(mig_sevenths(mig_profile), 7)) AS sevenths
FROM gpu_samples
GROUP BY date, hostname, uuid, mig_instance, epoch_ms(ts), namespace, pod;

-- The instants that start an observation, how many distinct pods the GPU's series named at
-- that instant (k pods sharing the GPU hold 1/k each), and the next such instant in the data
-- at hand.
CREATE OR REPLACE VIEW observation_starts AS
SELECT hostname, uuid, mig_instance, t, pods, t / 86400000 AS day_number,
       LEAD(t) OVER (PARTITION BY hostname, uuid, mig_instance ORDER BY t) AS t_next_seen
FROM (
    SELECT hostname, uuid, mig_instance, t, pods,
           LAG(t) OVER (PARTITION BY hostname, uuid, mig_instance ORDER BY t) AS t_prev
    FROM (
        SELECT hostname, uuid, mig_instance, t, COUNT(*) AS pods
        FROM (SELECT DISTINCT hostname, uuid, mig_instance, epoch_ms(ts) AS t, namespace, pod FROM gpu_samples)
        GROUP BY hostname, uuid, mig_instance, t
    )
)
WHERE t_prev IS NULL OR t - t_prev >= 1000;

-- Each GPU's first observation of each day: where a GPU's next observation lies days later,
-- this is how it is found (31_intervals.sql).
CREATE OR REPLACE VIEW day_first_starts AS
SELECT hostname, uuid, mig_instance, day_number, MIN(t) AS first_t
FROM observation_starts
GROUP BY hostname, uuid, mig_instance, day_number;
