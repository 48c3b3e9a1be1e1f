-- 50  Accepted units: what each team's GPU time delivered.
--
-- One unit per run that finished succeeded, counted in the month it finished, for the run's
-- team. The annotation gpuledger.io/accepted-units on the Workload (else on the job) overrides
-- the count, and gpuledger.io/unit names the unit (default `run`); a bad value is ignored. Failed and preempted runs
-- accept nothing. extra_units (the configuration's [units] files) adds units measured elsewhere.
--
-- Counter units ([[units.counters]], the table unit_counters): a Prometheus counter that pods
-- expose (vLLM's vllm:generation_tokens_total, ...), its samples in metric_samples with the pod's
-- `namespace` and `pod` labels (as Prometheus' Kubernetes discovery writes them). Per series, each
-- increase counts at the later sample's time, in its hour and month: a decrease is a restart,
-- counted from the new value; a series' first sample counts from zero only when its pod was
-- first seen after the capture began (else what it counted before is not this capture's).
-- Increases are exact decimals, summed and multiplied by the counter's scale once per run, unit
-- and hour (money_ratio: half to even at 6 decimals). They are the run's units whatever its
-- outcome (served tokens were served), for its team, in place of the default of one unit per
-- run; an accepted-units annotation on the run still overrides them.

-- Each run: its final outcome (its last segment's), whether it held a GPU (a pod of it appears in
-- the DCGM samples, or its Workload asks for nvidia.com/gpu), and its team: that of its earliest
-- pod that held a GPU (earliest start, name breaking ties). A Workload none of whose pods was
-- captured is a run too, with the Workload's team.
CREATE OR REPLACE VIEW runs AS
WITH run_pods AS (
    SELECT r.*, g.pod_key IS NOT NULL AS held_gpu,
           -- Sorts a run's pods: GPU pods first, then by start, name and incarnation.
           CASE WHEN g.pod_key IS NOT NULL THEN '0 ' ELSE '1 ' END || to_char(r.pod_started, '%Y-%m-%dT%H:%M:%S%.3f')
               || ' ' || r.pod || ' ' || lpad(CAST(r.incarnation AS VARCHAR), 6, '0') AS pod_order
    FROM pod_runs r LEFT JOIN (SELECT DISTINCT pod_key FROM gpu_pods) g ON g.pod_key = r.pod_key
),
run_summary AS (
    SELECT namespace, run, MAX(segment) AS segments, MIN(pod_order) AS first_pod_order,
           bool_or(held_gpu) AS held_gpu
    FROM run_pods GROUP BY namespace, run
),
last_segments AS (
    -- The pods of a Workload segment share its outcome and end.
    SELECT p.namespace, p.run, MIN(p.workload) AS workload, MIN(p.outcome) AS outcome, MAX(p.segment_ended) AS ended_at
    FROM run_pods p JOIN run_summary s ON s.namespace = p.namespace AND s.run = p.run AND p.segment = s.segments
    GROUP BY p.namespace, p.run
),
uncaptured AS (
    SELECT ws.namespace, ws.workload, ws.outcome, ws.ended_at, ws.segment
    FROM workload_segments ws
    JOIN (SELECT namespace, workload, MAX(segment) AS segment FROM workload_segments GROUP BY namespace, workload) l
      ON l.namespace = ws.namespace AND l.workload = ws.workload AND l.segment = ws.segment
    LEFT JOIN (SELECT DISTINCT namespace, workload FROM pod_runs WHERE workload IS NOT NULL) pr
           ON pr.namespace = ws.namespace AND pr.workload = ws.workload
    WHERE pr.workload IS NULL
)
SELECT l.namespace, l.run, l.workload, e.team, l.outcome, l.ended_at, s.segments,
       s.held_gpu OR COALESCE(w.gpu_count, 0) > 0 AS held_gpu
FROM last_segments l
JOIN run_summary s ON s.namespace = l.namespace AND s.run = l.run
JOIN run_pods e ON e.namespace = s.namespace AND e.run = s.run AND e.pod_order = s.first_pod_order
LEFT JOIN workloads_latest w ON w.namespace = l.namespace AND w.workload = l.workload
UNION ALL
SELECT u.namespace, u.workload AS run, u.workload,
       COALESCE(NULLIF(label(w.labels, s.team_label), ''), n.team_label, u.namespace) AS team,
       u.outcome, u.ended_at, u.segment AS segments, COALESCE(w.gpu_count, 0) > 0 AS held_gpu
FROM settings s
CROSS JOIN uncaptured u
JOIN workloads_latest w ON w.namespace = u.namespace AND w.workload = u.workload
LEFT JOIN namespaces_latest n ON n.namespace = u.namespace;

-- Every gpuledger.io/accepted-units annotation on a Workload or job, with its value as a number
-- where it is one. A value that is not a finite number >= 0 (NaN, "lots", -1) is bad input: it
-- is ignored (the next source decides) and listed in `bad_annotations`.
CREATE OR REPLACE VIEW unit_annotations AS
SELECT namespace, kind, name, value,
       CASE WHEN NOT isnan(number) AND number >= 0 AND number < CAST('Infinity' AS DOUBLE) THEN number END AS accepted_units
FROM (
    SELECT namespace, kind, name, value, TRY_CAST(value AS DOUBLE) AS number
    FROM (
        SELECT namespace, 'Workload' AS kind, workload AS name, label(annotations, 'gpuledger.io/accepted-units') AS value
        FROM workloads_latest
        UNION ALL
        SELECT namespace, kind, job AS name, label(annotations, 'gpuledger.io/accepted-units') AS value
        FROM jobs_latest
    ) WHERE value IS NOT NULL
);

CREATE OR REPLACE VIEW bad_annotations AS
SELECT namespace, kind, name, 'gpuledger.io/accepted-units' AS annotation, value,
       'not a finite number >= 0' AS reason
FROM unit_annotations WHERE accepted_units IS NULL;

-- The samples of each configured counter that its matcher selects, valid values only (a NaN,
-- negative or infinite reading counts nothing).
CREATE OR REPLACE VIEW counter_samples AS
SELECT c.unit, c.scale_numerator, c.scale_denominator, m.metric, m.labels, epoch_ms(m.ts) AS t,
       label(m.labels, 'namespace') AS namespace, label(m.labels, 'pod') AS pod,
       CAST(m.value AS DECIMAL(38, 6)) AS value
FROM metric_samples m
JOIN unit_counters c ON c.metric = m.metric
WHERE m.value IS NOT NULL AND NOT isnan(m.value) AND m.value >= 0 AND m.value < CAST('Infinity' AS DOUBLE)
  AND CASE c.match_op
          WHEN '=' THEN COALESCE(label(m.labels, c.match_label), '') = c.match_value
          WHEN '!=' THEN COALESCE(label(m.labels, c.match_label), '') <> c.match_value
          WHEN '=~' THEN regexp_like(COALESCE(label(m.labels, c.match_label), ''), c.match_value)
          WHEN '!~' THEN NOT regexp_like(COALESCE(label(m.labels, c.match_label), ''), c.match_value)
          ELSE true
      END;

-- Each sample's increase over the previous one of its series, with the pod incarnation (and so
-- the run) it belongs to at that time.
CREATE OR REPLACE VIEW counter_increases AS
SELECT s.unit, s.scale_numerator, s.scale_denominator, s.t, p.namespace, p.run,
       CASE WHEN s.previous IS NULL
                 THEN CASE WHEN epoch_ms(p.pod_started) > e.first_ms THEN s.value ELSE CAST(0 AS DECIMAL(38, 6)) END
            WHEN s.value >= s.previous THEN s.value - s.previous
            ELSE s.value
       END AS increase
FROM (
    SELECT *, LAG(value) OVER (PARTITION BY unit, metric, labels ORDER BY t) AS previous FROM counter_samples
) s
JOIN pod_runs p ON p.namespace = s.namespace AND p.pod = s.pod
               AND s.t >= p.valid_from_ms AND (p.valid_to_ms IS NULL OR s.t < p.valid_to_ms)
CROSS JOIN (SELECT COALESCE(MIN(first_ms), 0) AS first_ms FROM observed_extent) e;

-- Counter units per run, unit and UTC hour: the hour's increases summed, times the scale.
CREATE OR REPLACE VIEW counter_units AS
SELECT namespace, run, unit, hour_ms, to_char(to_timestamp_millis(hour_ms), '%Y-%m') AS month,
       money_ratio(SUM(increase), MAX(scale_numerator), MAX(scale_denominator)) AS accepted_units
FROM (SELECT *, t - t % 3600000 AS hour_ms FROM counter_increases)
GROUP BY namespace, run, unit, hour_ms, scale_numerator, scale_denominator;

-- Each run's units: its counters' (unless an annotation names its count), else one per
-- succeeded GPU run, the annotation overriding the count.
CREATE OR REPLACE VIEW run_units AS
WITH counted AS (
    SELECT namespace, run, month, unit, SUM(accepted_units) AS accepted_units
    FROM counter_units GROUP BY namespace, run, month, unit
),
counted_runs AS (SELECT DISTINCT namespace, run FROM counted),
annotated AS (
    SELECT r.namespace, r.run, r.team, r.outcome, r.ended_at, r.held_gpu,
           COALESCE(label(w.annotations, 'gpuledger.io/unit'), label(j.job_annotations, 'gpuledger.io/unit'), 'run') AS unit,
           COALESCE(wu.accepted_units, ju.accepted_units) AS annotated_units
    FROM runs r
    LEFT JOIN workloads_latest w ON w.namespace = r.namespace AND w.workload = r.workload
    LEFT JOIN workload_jobs j ON j.namespace = r.namespace AND j.workload = r.workload
    LEFT JOIN unit_annotations wu ON wu.kind = 'Workload' AND wu.namespace = r.namespace AND wu.name = r.workload
    LEFT JOIN unit_annotations ju ON ju.kind = j.job_kind AND ju.namespace = r.namespace AND ju.name = j.job
)
SELECT a.namespace, a.run, a.team, to_char(a.ended_at, '%Y-%m') AS month, a.unit,
       COALESCE(a.annotated_units, 1.0) AS accepted_units
FROM annotated a
LEFT JOIN counted_runs c ON c.namespace = a.namespace AND c.run = a.run
WHERE a.outcome = 'succeeded' AND a.ended_at IS NOT NULL AND a.held_gpu
  AND (a.annotated_units IS NOT NULL OR c.run IS NULL)
UNION ALL
SELECT c.namespace, c.run, a.team, c.month, c.unit, CAST(c.accepted_units AS DOUBLE) AS accepted_units
FROM counted c
JOIN annotated a ON a.namespace = c.namespace AND a.run = c.run
WHERE a.annotated_units IS NULL;

-- Units are counted to 6 decimals and summed as exact decimals, so that a team's units (and
-- its cost per unit, 60_chargeback.sql) do not depend on the order the runs are added in.
CREATE OR REPLACE VIEW accepted_units_monthly AS
SELECT month, team, unit, CAST(SUM(CAST(accepted_units AS DECIMAL(38, 6))) AS DOUBLE) AS accepted_units
FROM (
    SELECT month, team, unit, accepted_units FROM run_units
    UNION ALL
    SELECT month, team, unit, accepted_units FROM extra_units
)
GROUP BY month, team, unit;
