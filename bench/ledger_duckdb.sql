-- The sample path of the ledger (queries/30_spans.sql and 40_states.sql) in DuckDB's dialect,
-- for bench/ledger.sh: spans with max_gap, midnight cuts, MIG sevenths and leftover, activity,
-- states; GPU-hours by month, team and state. Pods' runs, teams and outcomes (the small object
-- side) are read from the ledger's pod_runs table. @STORE@ is replaced by the script.
CREATE MACRO mig_sevenths(p) AS TRY_CAST(NULLIF(regexp_extract(p, '^(?:[0-9]+c\.)?([0-9]+)g', 1), '') AS BIGINT);
CREATE TABLE pod_runs AS SELECT namespace, pod, team, outcome FROM '@STORE@/ledger/pod_runs.parquet';
CREATE TABLE result AS
WITH s AS (
    SELECT hostname, uuid, mig_instance, namespace, pod, engine_active, gpu_util,
           COALESCE(mig_sevenths(mig_profile), 7) AS sevenths, epoch_ms(ts) AS t,
           LEAD(epoch_ms(ts)) OVER (PARTITION BY hostname, uuid, mig_instance ORDER BY ts) AS t_next
    FROM read_parquet('@STORE@/gpu_samples/date=*/*.parquet', hive_partitioning = true)
), m AS (
    SELECT *, COALESCE(MEDIAN(CASE WHEN t_next > t THEN t_next - t END) OVER (PARTITION BY hostname, uuid, mig_instance), 30000) AS iv FROM s
), c AS (
    SELECT *, CASE WHEN t_next IS NOT NULL AND t_next - t <= 2.0 * iv THEN t_next ELSE t + iv END AS covered_end FROM m
), p AS (
    SELECT c.*, CASE WHEN k = 0 THEN t ELSE (t // 86400000 + 1) * 86400000 END AS ps,
           CASE WHEN k = 0 THEN LEAST(covered_end, (t // 86400000 + 1) * 86400000) ELSE covered_end END AS pe
    FROM (VALUES (0), (1)) piece(k) CROSS JOIN c
), q AS (
    SELECT *, pe - ps AS ms,
           CASE WHEN mig_instance IS NULL THEN 7 ELSE SUM(sevenths) OVER (PARTITION BY hostname, uuid, t, ps) END AS gs,
           CASE WHEN mig_instance IS NULL THEN 1 ELSE COUNT(*) OVER (PARTITION BY hostname, uuid, t, ps) END AS n
    FROM p WHERE pe > ps
), states AS (
    SELECT ps, CASE WHEN q.pod IS NULL THEN 'platform' ELSE COALESCE(r.team, q.namespace) END AS team,
           CASE WHEN q.pod IS NULL THEN 'unallocated' WHEN r.outcome = 'failed' THEN 'failed'
                WHEN r.outcome = 'preempted' THEN 'preempted'
                WHEN CASE WHEN engine_active IS NOT NULL THEN engine_active >= 0.05 ELSE COALESCE(gpu_util, 0) >= 5 END THEN 'productive'
                ELSE 'allocated_idle' END AS state,
           CAST(ms * sevenths AS DOUBLE) AS w
    FROM q LEFT JOIN pod_runs r ON r.namespace = q.namespace AND r.pod = q.pod
    UNION ALL
    SELECT ps, 'platform', 'unallocated', CAST(ms * (7 - gs) AS DOUBLE) / n FROM q WHERE mig_instance IS NOT NULL AND gs < 7
)
SELECT strftime(make_timestamp((ps // 86400000) * 86400000 * 1000), '%Y-%m') AS month, team, state, SUM(w) / 7.0 / 3600000.0 AS gpu_hours
FROM states GROUP BY ALL;
