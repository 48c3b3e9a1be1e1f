-- 50  Accepted units: what each team's GPU time delivered.
--
-- One unit per run that finished succeeded, counted in the month it finished, for the run's
-- team. The annotation gpuledger.io/accepted-units on the Workload (else on the job) overrides
-- the count, and gpuledger.io/unit names the unit (default `run`); a bad value is ignored. Failed and preempted runs
-- accept nothing. extra_units (the configuration's [units] files) adds units measured elsewhere.

-- Each run's final outcome: its last segment's.
CREATE OR REPLACE VIEW runs AS
SELECT namespace, run, workload, team, outcome, ended_at, segments
FROM (
    SELECT r.namespace, r.run, r.workload, r.team, r.outcome, r.segment_ended AS ended_at,
           MAX(r.segment) OVER (PARTITION BY r.namespace, r.run) AS segments,
           ROW_NUMBER() OVER (PARTITION BY r.namespace, r.run ORDER BY r.segment DESC, epoch_ms(r.pod_started) DESC, r.pod DESC) AS run_rank
    FROM pod_runs r
) WHERE run_rank = 1;

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

CREATE OR REPLACE VIEW run_units AS
SELECT r.namespace, r.run, r.team, to_char(r.ended_at, '%Y-%m') AS month,
       COALESCE(label(w.annotations, 'gpuledger.io/unit'), label(j.job_annotations, 'gpuledger.io/unit'), 'run') AS unit,
       COALESCE(wu.accepted_units, ju.accepted_units, 1.0) AS accepted_units
FROM runs r
LEFT JOIN workloads_latest w ON w.namespace = r.namespace AND w.workload = r.workload
LEFT JOIN workload_jobs j ON j.namespace = r.namespace AND j.workload = r.workload
LEFT JOIN unit_annotations wu ON wu.kind = 'Workload' AND wu.namespace = r.namespace AND wu.name = r.workload
LEFT JOIN unit_annotations ju ON ju.kind = j.job_kind AND ju.namespace = r.namespace AND ju.name = j.job
WHERE r.outcome = 'succeeded' AND r.ended_at IS NOT NULL;

CREATE OR REPLACE VIEW accepted_units_monthly AS
SELECT month, team, unit, SUM(accepted_units) AS accepted_units
FROM (
    SELECT month, team, unit, accepted_units FROM run_units
    UNION ALL
    SELECT month, team, unit, accepted_units FROM extra_units
)
GROUP BY month, team, unit;
