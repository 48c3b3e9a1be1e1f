-- 20  Runs and their segments: which run each pod belongs to, and how each segment ended.
--
-- A run is a Kueue Workload (found from the pod through Kubernetes identity), or a pod that no
-- Workload owns. A Workload's run has one segment per admission: after an eviction (preemption)
-- the requeued Workload's next admission starts a new segment. Each segment ends succeeded,
-- failed, preempted, or is still running at the end of the data.

-- Each condition transition of each Workload, once (every stored version repeats its conditions).
CREATE OR REPLACE VIEW workload_transitions AS
SELECT DISTINCT namespace, name AS workload, type, status, reason, last_transition_time AS at
FROM workload_conditions
WHERE last_transition_time IS NOT NULL;

-- Admissions: Admitted turning True (the Workload's pods may start), else QuotaReserved for a
-- Workload that has no Admitted condition at all. Segment n runs from its admission to the next.
CREATE OR REPLACE VIEW workload_admissions AS
SELECT namespace, workload, at AS admitted_at,
       ROW_NUMBER() OVER (PARTITION BY namespace, workload ORDER BY at) AS segment,
       LEAD(at) OVER (PARTITION BY namespace, workload ORDER BY at) AS next_admitted_at
FROM (
    SELECT DISTINCT t.namespace, t.workload, t.at
    FROM workload_transitions t
    LEFT JOIN (SELECT DISTINCT namespace, workload FROM workload_transitions WHERE type = 'Admitted') q
           ON q.namespace = t.namespace AND q.workload = t.workload
    WHERE t.status = 'True'
      AND t.type = CASE WHEN q.workload IS NULL THEN 'QuotaReserved' ELSE 'Admitted' END
);

-- What ended each segment: the first Evicted or Finished transition to True inside it.
-- Evicted wins a tie: a suspended job's pods are killed and may then report failure.
CREATE OR REPLACE VIEW workload_segment_ends AS
SELECT namespace, workload, segment, type AS end_type, reason AS end_reason, at AS ended_at
FROM (
    SELECT a.namespace, a.workload, a.segment, t.type, t.reason, t.at,
           ROW_NUMBER() OVER (PARTITION BY a.namespace, a.workload, a.segment
                              ORDER BY t.at, CASE t.type WHEN 'Evicted' THEN 0 ELSE 1 END) AS end_rank
    FROM workload_admissions a
    JOIN workload_transitions t ON t.namespace = a.namespace AND t.workload = a.workload
    WHERE t.status = 'True' AND t.type IN ('Evicted', 'Finished')
      AND t.at >= a.admitted_at
      AND (a.next_admitted_at IS NULL OR t.at < a.next_admitted_at)
) WHERE end_rank = 1;

-- The job that owns each Workload (batch/v1 Job, JobSet, RayJob, ...), by uid, else by kind and name.
CREATE OR REPLACE VIEW workload_jobs AS
SELECT w.namespace, w.workload, COALESCE(ju.job, jn.job) AS job, COALESCE(ju.kind, jn.kind) AS job_kind,
       COALESCE(ju.outcome, jn.outcome) AS job_outcome,
       COALESCE(ju.outcome_reason, jn.outcome_reason) AS job_outcome_reason,
       COALESCE(ju.completion_time, jn.completion_time) AS job_completion_time,
       COALESCE(ju.annotations, jn.annotations) AS job_annotations,
       COALESCE(ju.deleted_at, jn.deleted_at) AS job_deleted_at
FROM workloads_latest w
LEFT JOIN jobs_latest ju ON ju.uid = w.owner_uid
LEFT JOIN jobs_latest jn ON w.owner_uid IS NULL AND jn.namespace = w.namespace
                         AND jn.kind = w.owner_kind AND jn.job = w.owner_name;

-- Every segment of every Workload with its outcome. The Workload's history decides first:
-- Evicted -> preempted, except an eviction that gave up on the run (PodsReadyTimeout: its pods
-- never became ready; InactiveWorkload / Deactivated: its owner deactivated it), which failed;
-- Finished -> its reason. A segment the data shows no end for takes the job's final condition
-- if it is the last segment, was evicted if a later admission exists, and failed (cancelled)
-- if its Workload or job was deleted before it finished.
CREATE OR REPLACE VIEW workload_segments AS
SELECT a.namespace, a.workload, a.segment, a.admitted_at,
       CASE
           WHEN e.end_type = 'Evicted' AND (e.end_reason IN ('PodsReadyTimeout', 'InactiveWorkload')
                                            OR e.end_reason LIKE 'Deactivated%') THEN 'failed'
           WHEN e.end_type = 'Evicted' THEN 'preempted'
           WHEN e.end_type = 'Finished' AND e.end_reason = 'Failed' THEN 'failed'
           WHEN e.end_type = 'Finished' AND e.end_reason = 'Succeeded' THEN 'succeeded'
           WHEN e.end_type = 'Finished' AND j.job_outcome = 'Failed' THEN 'failed'
           WHEN e.end_type = 'Finished' THEN 'succeeded'
           WHEN a.next_admitted_at IS NOT NULL THEN 'preempted'
           WHEN j.job_outcome = 'Failed' THEN 'failed'
           WHEN j.job_outcome = 'Complete' THEN 'succeeded'
           WHEN w.deleted_at IS NOT NULL OR j.job_deleted_at IS NOT NULL THEN 'failed'
           ELSE 'running'
       END AS outcome,
       CASE
           WHEN e.ended_at IS NOT NULL THEN e.ended_at
           WHEN a.next_admitted_at IS NOT NULL THEN a.next_admitted_at
           WHEN j.job_outcome IS NOT NULL THEN j.job_completion_time
           ELSE LEAST(w.deleted_at, j.job_deleted_at)
       END AS ended_at,
       COALESCE(e.end_reason, j.job_outcome_reason,
                CASE WHEN w.deleted_at IS NOT NULL OR j.job_deleted_at IS NOT NULL THEN 'Deleted' END) AS end_reason
FROM workload_admissions a
LEFT JOIN workloads_latest w ON w.namespace = a.namespace AND w.workload = a.workload
LEFT JOIN workload_segment_ends e
       ON e.namespace = a.namespace AND e.workload = a.workload AND e.segment = a.segment
LEFT JOIN workload_jobs j ON j.namespace = a.namespace AND j.workload = a.workload;

-- The Workload of each pod incarnation, first found of (docs/accounting.md "Identity"):
--   wa       the Workload its kueue.x-k8s.io/workload annotation names;
--   wp       a Workload owned by the pod itself (Kueue's plain pods);
--   w0..w9   the Workload owned by the nearest controller owner, following owners upward through
--            the jobs (Job -> JobSet -> TrainJob, RayCluster -> RayJob, ...): w0 the pod's owner,
--            wN its owner N levels up (10 levels in all);
--   wn       a Workload owned by an owner of the same kind and name (captures without uids).
CREATE OR REPLACE VIEW workload_owners AS
SELECT namespace, workload, owner_uid, owner_kind, owner_name
FROM (
    SELECT w.*, ROW_NUMBER() OVER (PARTITION BY owner_uid ORDER BY created_at DESC, workload) AS owner_rank
    FROM workloads_latest w WHERE owner_uid IS NOT NULL
) WHERE owner_rank = 1;

-- Each job's controller owners upward: a1 its owner, a2 that owner's owner, ... up to a9.
-- (Written out join by join rather than as a recursive query, which not every engine runs.)
CREATE OR REPLACE VIEW job_chains AS
SELECT j0.uid, j0.owner_uid AS a1, j1.owner_uid AS a2, j2.owner_uid AS a3, j3.owner_uid AS a4, j4.owner_uid AS a5, j5.owner_uid AS a6, j6.owner_uid AS a7, j7.owner_uid AS a8, j8.owner_uid AS a9
FROM jobs_latest j0
LEFT JOIN jobs_latest j1 ON j1.uid = j0.owner_uid
LEFT JOIN jobs_latest j2 ON j2.uid = j1.owner_uid
LEFT JOIN jobs_latest j3 ON j3.uid = j2.owner_uid
LEFT JOIN jobs_latest j4 ON j4.uid = j3.owner_uid
LEFT JOIN jobs_latest j5 ON j5.uid = j4.owner_uid
LEFT JOIN jobs_latest j6 ON j6.uid = j5.owner_uid
LEFT JOIN jobs_latest j7 ON j7.uid = j6.owner_uid
LEFT JOIN jobs_latest j8 ON j8.uid = j7.owner_uid
WHERE j0.uid IS NOT NULL;

CREATE OR REPLACE VIEW pod_workloads AS
SELECT p.pod_key,
       COALESCE(wa.workload, wp.workload, w0.workload, w1.workload, w2.workload, w3.workload, w4.workload,
                w5.workload, w6.workload, w7.workload, w8.workload, w9.workload, wn.workload) AS workload
FROM pods_latest p
LEFT JOIN workloads_latest wa ON wa.namespace = p.namespace AND wa.workload = p.workload_name
LEFT JOIN workload_owners wp ON wp.owner_uid = p.uid
LEFT JOIN job_chains c ON c.uid = p.owner_uid
LEFT JOIN workload_owners w0 ON w0.owner_uid = p.owner_uid
LEFT JOIN workload_owners w1 ON w1.owner_uid = c.a1
LEFT JOIN workload_owners w2 ON w2.owner_uid = c.a2
LEFT JOIN workload_owners w3 ON w3.owner_uid = c.a3
LEFT JOIN workload_owners w4 ON w4.owner_uid = c.a4
LEFT JOIN workload_owners w5 ON w5.owner_uid = c.a5
LEFT JOIN workload_owners w6 ON w6.owner_uid = c.a6
LEFT JOIN workload_owners w7 ON w7.owner_uid = c.a7
LEFT JOIN workload_owners w8 ON w8.owner_uid = c.a8
LEFT JOIN workload_owners w9 ON w9.owner_uid = c.a9
LEFT JOIN workloads_latest wn ON p.owner_uid IS NULL AND wn.namespace = p.namespace
                              AND wn.owner_kind = p.owner_kind AND wn.owner_name = p.owner_name;

-- Each pod incarnation's run, segment, outcome and team. A Workload pod belongs to the segment of
-- the last admission at or before it started (the first segment if it started earlier). A pod
-- without a Workload is its own run (`pod/<name>`, `pod/<name>#2` for a later incarnation of the
-- name): preempted when it was evicted or disrupted, else by its phase.
-- Team: the team label on the pod, else on the Workload, else on the namespace, else the
-- namespace name; a label with an empty value counts as absent.
-- `pod_failed`: the pod itself failed (phase Failed). In a segment that went on (the job
-- retried it) that pod's time is a failed attempt (40_states.sql).
CREATE OR REPLACE VIEW pod_runs AS
SELECT namespace, pod, workload, run, segment, outcome, team, pod_started, segment_started, segment_ended,
       last_termination_reason, last_exit_code, node_name, pod_key, incarnation, valid_from_ms, valid_to_ms,
       uid, pod_failed
FROM (
    SELECT *, ROW_NUMBER() OVER (PARTITION BY pod_key ORDER BY segment_order) AS segment_rank
    FROM (
        SELECT p.namespace, p.pod, pw.workload,
               COALESCE(pw.workload, 'pod/' || p.pod || CASE WHEN p.incarnation > 1 THEN '#' || CAST(p.incarnation AS VARCHAR) ELSE '' END) AS run,
               CASE WHEN pw.workload IS NULL THEN 1 ELSE ws.segment END AS segment,
               CASE
                   WHEN pw.workload IS NOT NULL THEN COALESCE(ws.outcome, 'running')
                   WHEN p.disruption_target OR p.reason IN ('Evicted', 'Preempting') THEN 'preempted'
                   WHEN p.phase = 'Failed' THEN 'failed'
                   WHEN p.phase = 'Succeeded' THEN 'succeeded'
                   ELSE 'running'
               END AS outcome,
               COALESCE(NULLIF(label(p.labels, s.team_label), ''), NULLIF(label(w.labels, s.team_label), ''), n.team_label, p.namespace) AS team,
               p.first_seen AS pod_started,
               COALESCE(ws.admitted_at, p.first_seen) AS segment_started,
               CASE WHEN pw.workload IS NOT NULL THEN ws.ended_at
                    WHEN p.phase IN ('Failed', 'Succeeded') OR p.disruption_target THEN p.last_seen END AS segment_ended,
               p.last_termination_reason, p.last_exit_code, p.node_name,
               p.pod_key, p.incarnation, p.valid_from_ms, p.valid_to_ms,
               p.uid, COALESCE(p.phase = 'Failed', false) AS pod_failed,
               -- Latest admission at or before the pod started first; failing that, the earliest.
               CASE WHEN ws.admitted_at <= p.first_seen THEN -epoch_ms(ws.admitted_at)
                    ELSE 4102444800000 + epoch_ms(ws.admitted_at) END AS segment_order
        FROM settings s
        CROSS JOIN pods_latest p
        LEFT JOIN pod_workloads pw ON pw.pod_key = p.pod_key
        LEFT JOIN workloads_latest w ON w.namespace = p.namespace AND w.workload = pw.workload
        LEFT JOIN workload_segments ws ON ws.namespace = p.namespace AND ws.workload = pw.workload
        LEFT JOIN namespaces_latest n ON n.namespace = p.namespace
    )
) WHERE segment_rank = 1;
