-- 30  Observed time: the span of GPU time each DCGM sample covers.
--
-- A sample of one GPU (or MIG instance) at time t covers [t, t_next), t_next being that GPU's
-- next sample. The scrape interval is the median spacing of the GPU's samples; a gap longer than
-- max_gap_factor x interval ends the covered span at t + interval, and the rest of the gap is
-- unobserved. The last sample covers one interval. Spans are split at UTC midnight, so every
-- piece lies in one day (and so in one month). Times are milliseconds since the epoch.
--
-- A MIG instance with profile Ng.* (3g.40gb) weighs N sevenths of its GPU; a whole GPU weighs 7.
-- What a MIG GPU's instances leave over (7 minus their sevenths) is the parent GPU's own time.
-- A GPU whose samples are all one timestamp has no spacing: 30 s, the exporter's default, is used.
--
-- In a CROSS JOIN the small table comes first: DataFusion holds the left side in memory.

CREATE OR REPLACE VIEW sample_spans AS
SELECT date, hostname, uuid, mig_instance, model_name, namespace, pod, engine_active, gpu_util, xid_error,
       sevenths, t, covered_end,
       -- The part of a long gap not covered (0 when the next sample came in time).
       CASE WHEN t_next IS NOT NULL AND t_next > covered_end THEN t_next - covered_end ELSE 0 END AS unobserved_ms
FROM (
    SELECT g.*,
           CASE WHEN t_next IS NOT NULL AND t_next - t <= s.max_gap_factor * interval_ms THEN t_next
                ELSE t + interval_ms END AS covered_end
    -- The one-row table goes first in a cross join: the left side is held in memory.
    FROM settings s CROSS JOIN (
        SELECT *, COALESCE(MEDIAN(CASE WHEN t_next > t THEN t_next - t END)
                               OVER (PARTITION BY hostname, uuid, mig_instance), 30000) AS interval_ms
        FROM (
            SELECT date, hostname, uuid, mig_instance, model_name, namespace, pod, engine_active, gpu_util, xid_error,
                   COALESCE(mig_sevenths(mig_profile), 7) AS sevenths,
                   epoch_ms(ts) AS t,
                   LEAD(epoch_ms(ts)) OVER (PARTITION BY hostname, uuid, mig_instance ORDER BY ts) AS t_next
            FROM gpu_samples
        )
    ) g
);
