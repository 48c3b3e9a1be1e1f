-- 31  Spacings: how long after each observation of a GPU the next one came.
--
-- The scrape interval of a GPU is the median (the mean of the middle two for an even count) of
-- the spacings between its consecutive observations that start in the calendar month (UTC). It
-- is taken (in 32_spans.sql) from counts of each spacing, so that the counts of separate days
-- add up to the month's and every engine (one day at a time in process, all at once on a
-- cluster) gets the same figure. A month with no spacing uses 30 s, the exporter's default.
--
-- Input besides 30_observations.sql: `known_day_starts`, the GPUs' first observations of every
-- day (`day_first_starts` over the whole store; the in-process ledger gathers it day by day).

-- Each observation with the next one: the next at hand, else the GPU's first observation of the
-- next later day it was seen (however many days later); and the energy counter at both.
CREATE OR REPLACE VIEW observation_next AS
SELECT o.hostname, o.uuid, o.mig_instance, o.t, o.day_number, o.pods, o.per_process, COALESCE(o.t_next_seen, n.next_first_t) AS t_next,
       o.energy_mj, o.power_w,
       CASE WHEN o.t_next_seen IS NOT NULL THEN o.energy_next_seen ELSE n.next_first_energy_mj END AS energy_next
FROM observation_starts o
LEFT JOIN (
    SELECT hostname, uuid, mig_instance, day_number,
           LEAD(first_t) OVER (PARTITION BY hostname, uuid, mig_instance ORDER BY day_number) AS next_first_t,
           LEAD(first_energy_mj) OVER (PARTITION BY hostname, uuid, mig_instance ORDER BY day_number) AS next_first_energy_mj
    FROM known_day_starts
) n ON (n.hostname IS NOT DISTINCT FROM o.hostname) AND (n.uuid IS NOT DISTINCT FROM o.uuid)
   AND (n.mig_instance IS NOT DISTINCT FROM o.mig_instance) AND (n.day_number IS NOT DISTINCT FROM o.day_number)
   AND o.t_next_seen IS NULL;

-- How often each spacing occurs, per GPU, month and day (the day the spacing starts).
CREATE OR REPLACE VIEW spacing_counts AS
SELECT hostname, uuid, mig_instance, to_char(to_timestamp_millis(t), '%Y-%m') AS month, day_number,
       t_next - t AS spacing_ms, COUNT(*) AS spacings
FROM observation_next
WHERE t_next IS NOT NULL
GROUP BY hostname, uuid, mig_instance, to_char(to_timestamp_millis(t), '%Y-%m'), day_number, t_next - t;
