-- 30  Observations: when each GPU was seen.
--
-- Observation: the samples of one GPU (or MIG instance) less than 1000 ms after its previous
-- sample are one observation of it (a capture read twice, a /federate file overlapping a scrape
-- file). The earliest sample speaks for the observation: its field values and the pods it names
-- (32_spans.sql). docs/accounting.md measures the 1000 ms from an observation's first sample; the two
-- readings differ only for exporters scraped faster than once a second.
--
-- Times are milliseconds since the epoch; `day_number` counts UTC days since the epoch.

-- Samples from HA pairs of scrapers. Samples with a replica label (`prometheus_replica`,
-- `replica`, `__replica__`) come from two scrapers, each scraping at its own moments: per GPU
-- and UTC day only the replica seen first counts (else the GPU would be seen twice as often,
-- its pods named alternately by the two). Samples without one all count. (`strpos` first: most
-- rows have no replica, and reading their labels as JSON would cost every row.)
CREATE OR REPLACE VIEW replica_samples AS
SELECT * FROM gpu_samples
WHERE labels IS NULL OR strpos(labels, 'replica') = 0
UNION ALL
SELECT * EXCLUDE (replica, first_replica)
FROM (
    SELECT *, FIRST_VALUE(replica) OVER (PARTITION BY hostname, uuid, epoch_ms(ts) / 86400000
                                         ORDER BY ts, replica) AS first_replica
    FROM (
        SELECT *, COALESCE(NULLIF(label(labels, 'prometheus_replica'), ''), NULLIF(label(labels, 'replica'), ''),
                           NULLIF(label(labels, '__replica__'), '')) AS replica
        FROM gpu_samples
        WHERE strpos(labels, 'replica') > 0
    )
)
WHERE replica IS NULL OR replica = first_replica;

-- DRA MIG (docs/accounting.md "DRA"): dcgm-exporter keys a DRA-allocated MIG device by its
-- parent GPU, so the pod holding it is named on the parent's series (no `GPU_I_ID`), with
-- `dra_mig_profile` and `dra_mig_device_uuid`, while the instance series carry no pod. Each
-- distinct MIG device so named takes one pod-less instance of its profile on that GPU at that
-- instant, the lowest `GPU_I_ID` first, in the order of the devices' UUIDs; its pods (several,
-- where a claim is shared) hold that instance. One row per instance and pod.
CREATE OR REPLACE VIEW dra_mig_instances AS
WITH holders AS (
    SELECT hostname, uuid, ts, namespace, pod, label(labels, 'dra_mig_profile') AS profile,
           DENSE_RANK() OVER (PARTITION BY hostname, uuid, ts, label(labels, 'dra_mig_profile')
                              ORDER BY label(labels, 'dra_mig_device_uuid')) AS slot
    -- (gpu_samples, not replica_samples: this is matched with replica_samples' rows below,
    -- and each reading of the replica window costs a pass over the day's samples.)
    FROM gpu_samples
    WHERE mig_instance IS NULL AND pod IS NOT NULL AND strpos(labels, 'dra_mig_profile') > 0
),
free AS (
    SELECT hostname, uuid, ts, mig_instance, mig_profile,
           ROW_NUMBER() OVER (PARTITION BY hostname, uuid, ts, mig_profile ORDER BY mig_instance) AS slot
    FROM (
        SELECT DISTINCT s.hostname, s.uuid, s.ts, s.mig_instance, s.mig_profile
        FROM (SELECT DISTINCT hostname, uuid, ts FROM holders) g
        JOIN gpu_samples s ON s.hostname = g.hostname AND s.uuid = g.uuid AND s.ts = g.ts
        WHERE s.mig_instance IS NOT NULL AND s.pod IS NULL
    )
)
SELECT DISTINCT f.hostname, f.uuid, f.ts, f.mig_instance, h.namespace, h.pod
FROM holders h
JOIN free f ON f.hostname = h.hostname AND f.uuid = h.uuid AND f.ts = h.ts AND f.mig_profile = h.profile AND f.slot = h.slot;

-- The samples that count. Where a GPU has MIG instance series (that UTC day), its series
-- without an instance (device-wide fields: power, temperature) are not a second observation
-- of the whole GPU: its time is its instances' shares and the leftover (40_states.sql). A
-- pod-less instance a DRA MIG device took (dra_mig_instances) is its pods'.
CREATE OR REPLACE VIEW counted_samples AS
SELECT s.* EXCLUDE (namespace, pod), COALESCE(a.namespace, s.namespace) AS namespace, COALESCE(a.pod, s.pod) AS pod
FROM replica_samples s
LEFT JOIN dra_mig_instances a
       ON a.hostname = s.hostname AND a.uuid = s.uuid AND a.ts = s.ts AND a.mig_instance = s.mig_instance AND s.pod IS NULL
WHERE s.mig_instance IS NOT NULL
UNION ALL
SELECT s.* EXCLUDE (namespace, pod), s.namespace, s.pod
FROM replica_samples s
LEFT JOIN (SELECT DISTINCT hostname, uuid, epoch_ms(ts) / 86400000 AS day_number
           FROM replica_samples WHERE mig_instance IS NOT NULL) m
       ON m.hostname = s.hostname AND m.uuid = s.uuid AND m.day_number = epoch_ms(s.ts) / 86400000
WHERE s.mig_instance IS NULL AND m.uuid IS NULL;

-- One row per GPU, instant and pod (several containers of one pod, or a row stored twice, are
-- one holder of the GPU). The steps below read the samples only through it. `pod_uid`: the
-- pod's uid where the exporter writes it (docs/accounting.md "Identity": it decides which pod of that
-- name the sample names). A MIG instance holds `slices` of its GPU's `gpu_slices` compute
-- slices: N of profile Ng.* (3g.40gb: 3) of 7, or of 4 on an A30; a whole GPU holds all of them.
-- Both are integers, so that GPU time can be split exactly (40_states.sql).
-- `active`: the GPU was busy at that instant, by engine activity
-- (DCGM_FI_PROF_GR_ENGINE_ACTIVE >= active_threshold_engine) where the sample has it, else by
-- utilisation (DCGM_FI_DEV_GPU_UTIL >= active_threshold_util); with neither, not active.
--
-- DRA (docs/accounting.md "DRA"): a sample that names a ResourceClaim (`dra_claim_namespace`,
-- `dra_claim_name`, `dra_device_name`) is matched with the claim's reservations at that instant
-- (10_objects.sql `claim_reservations`: the claim's version then, on that device). Without pod
-- labels it stands for every pod the claim was reserved for, one row each; with them, for its
-- own pod. `via_claim` names the claim the pod holds the GPU through (the pods of a claim
-- share its part of a device several claims share: 40_states.sql), `claim_capacity` the
-- claim's consumed capacity of the configured key (`dra_capacity_key`). A pod-less sample of a
-- claim the capture does not know, or reserved for no pod then, stays unallocated; a sample
-- whose pod the claim was not reserved for keeps its pod, without `via_claim`
-- (`dra_mismatches` names it).
CREATE OR REPLACE VIEW pod_samples AS
SELECT p.date, p.hostname, p.uuid, p.mig_instance, p.t,
       COALESCE(p.namespace, c.r_namespace) AS namespace, COALESCE(p.pod, c.r_pod) AS pod,
       p.model_name, p.engine_active, p.gpu_util, p.xid_error, p.energy_mj, p.power_w, p.slices, p.gpu_slices,
       COALESCE(p.pod_uid, c.r_pod_uid) AS pod_uid, p.claim_namespace, p.claim,
       CASE WHEN c.r_pod IS NOT NULL THEN c.r_namespace || '/' || c.r_claim END AS via_claim,
       CASE WHEN c.r_pod IS NOT NULL THEN quantity_units(label(c.r_capacity, s.dra_capacity_key)) END AS claim_capacity,
       CASE WHEN p.engine_active IS NOT NULL THEN p.engine_active >= s.active_threshold_engine
            ELSE COALESCE(p.gpu_util, 0) >= s.active_threshold_util END AS active
FROM settings s
CROSS JOIN (
SELECT date, hostname, uuid, mig_instance, epoch_ms(ts) AS t, namespace, pod,
       MIN(model_name) AS model_name, MAX(engine_active) AS engine_active, MAX(gpu_util) AS gpu_util,
       MAX(xid_error) AS xid_error, MIN(energy_mj) AS energy_mj, MAX(power_w) AS power_w,
       MIN(COALESCE(mig_sevenths(mig_profile), CASE WHEN strpos(upper(model_name), 'A30') > 0 THEN 4 ELSE 7 END)) AS slices,
       MIN(CASE WHEN strpos(upper(model_name), 'A30') > 0 THEN 4 ELSE 7 END) AS gpu_slices,
       MAX(CASE WHEN strpos(labels, 'pod_uid') > 0 THEN NULLIF(label(labels, 'pod_uid'), '') END) AS pod_uid,
       -- (`strpos` first: only DRA samples have the labels, and reading JSON costs every row.)
       CASE WHEN strpos(labels, 'dra_claim_name') > 0 THEN NULLIF(label(labels, 'dra_claim_namespace'), '') END AS claim_namespace,
       CASE WHEN strpos(labels, 'dra_claim_name') > 0 THEN NULLIF(label(labels, 'dra_claim_name'), '') END AS claim,
       CASE WHEN strpos(labels, 'dra_device_name') > 0 THEN NULLIF(label(labels, 'dra_device_name'), '') END AS dra_device
FROM counted_samples
GROUP BY date, hostname, uuid, mig_instance, epoch_ms(ts), namespace, pod,
         CASE WHEN strpos(labels, 'dra_claim_name') > 0 THEN NULLIF(label(labels, 'dra_claim_namespace'), '') END,
         CASE WHEN strpos(labels, 'dra_claim_name') > 0 THEN NULLIF(label(labels, 'dra_claim_name'), '') END,
         CASE WHEN strpos(labels, 'dra_device_name') > 0 THEN NULLIF(label(labels, 'dra_device_name'), '') END
) p
-- Only samples that name a claim can match; a row that names a pod matches at most its own
-- reservation, so only pod-less rows multiply.
-- (The reservations' columns under names of their own, and nullable, as the outer side of a
-- join is: Ballista's executors keep the declared nullability of a column they fill with nulls.)
LEFT JOIN (
    SELECT NULLIF(claim_namespace, '') AS r_namespace, NULLIF(claim, '') AS r_claim, device AS r_device, pod AS r_pod,
           pod_uid AS r_pod_uid, consumed_capacity AS r_capacity, NULLIF(valid_from_ms, -1) AS r_from_ms, valid_to_ms AS r_to_ms
    FROM claim_reservations
) c
  ON c.r_namespace = p.claim_namespace AND c.r_claim = p.claim AND c.r_device = p.dra_device
 AND p.t >= c.r_from_ms AND (c.r_to_ms IS NULL OR p.t < c.r_to_ms)
 AND (p.pod IS NULL OR (c.r_pod = p.pod AND c.r_namespace = p.namespace));

-- Samples that name both a pod and a claim the capture holds, where the claim was not reserved
-- for that pod at that instant: the pod labels win; this names the GPU and time of each.
CREATE OR REPLACE VIEW dra_mismatches AS
SELECT p.hostname, p.uuid, p.mig_instance, p.t, p.namespace, p.pod, p.claim_namespace, p.claim
FROM (SELECT DISTINCT namespace, name FROM resource_claims) k
JOIN pod_samples p ON p.claim_namespace = k.namespace AND p.claim = k.name
WHERE p.pod IS NOT NULL AND p.via_claim IS NULL;

-- The mismatches of a day, one row per GPU, pod and claim with the first and last instant and
-- the number of samples: what `gpuledger ledger` warns about.
CREATE OR REPLACE VIEW day_dra_mismatches AS
SELECT hostname, uuid, mig_instance, namespace, pod, claim_namespace, claim, t / 86400000 AS day_number,
       MIN(t) AS first_t, MAX(t) AS last_t, COUNT(*) AS samples
FROM dra_mismatches
GROUP BY hostname, uuid, mig_instance, namespace, pod, claim_namespace, claim, t / 86400000;

-- The instants that start an observation, how many pods hold the GPU in that observation (k
-- pods sharing the GPU hold 1/k each, or their measured shares: 40_states.sql), and the next
-- such instant in the data at hand; with the GPU's energy counter and power reading at the
-- instant and the counter at the next one (energy, 32_spans.sql).
-- `per_process`: the exporter wrote a pod-less series of the GPU beside its pods' series at the
-- instant (dcgm-exporter's per-process values on a time-sliced GPU: the device's own
-- DCGM_FI_DEV_GPU_UTIL beside each pod's). The pod-less row then only marks the GPU observed:
-- it holds no share, and each pod's activity is its own utilisation (32_spans.sql).
CREATE OR REPLACE VIEW observation_starts AS
SELECT hostname, uuid, mig_instance, t, pods, per_process, t / 86400000 AS day_number, energy_mj, power_w,
       LEAD(t) OVER (PARTITION BY hostname, uuid, mig_instance ORDER BY t) AS t_next_seen,
       LEAD(energy_mj) OVER (PARTITION BY hostname, uuid, mig_instance ORDER BY t) AS energy_next_seen
FROM (
    SELECT hostname, uuid, mig_instance, t, pods, per_process, energy_mj, power_w,
           LAG(t) OVER (PARTITION BY hostname, uuid, mig_instance ORDER BY t) AS t_prev
    FROM (
        SELECT hostname, uuid, mig_instance, t,
               COUNT(*) - CASE WHEN COUNT(pod) > 0 THEN SUM(CASE WHEN pod IS NULL AND claim IS NULL THEN 1 ELSE 0 END) ELSE 0 END AS pods,
               COUNT(pod) > 0 AND SUM(CASE WHEN pod IS NULL AND claim IS NULL THEN 1 ELSE 0 END) > 0 AS per_process,
               MIN(energy_mj) AS energy_mj, MAX(power_w) AS power_w
        FROM pod_samples
        GROUP BY hostname, uuid, mig_instance, t
    )
)
WHERE t_prev IS NULL OR t - t_prev >= 1000;

-- Each GPU's first observation of each day, with its energy counter: where a GPU's next
-- observation lies days later, this is how it is found (31_intervals.sql).
CREATE OR REPLACE VIEW day_first_starts AS
SELECT hostname, uuid, mig_instance, day_number, first_t, first_energy_mj
FROM (
    SELECT hostname, uuid, mig_instance, day_number, t AS first_t, energy_mj AS first_energy_mj,
           ROW_NUMBER() OVER (PARTITION BY hostname, uuid, mig_instance, day_number ORDER BY t) AS start_rank
    FROM observation_starts
)
WHERE start_rank = 1;

-- The XID field of each GPU at each instant it was read. DCGM_FI_DEV_XID_ERRORS holds the last
-- XID error the GPU reported (0: none since the driver loaded), so an error happened where the
-- value changes to a non-zero code (32_spans.sql). MIG instances repeat their GPU's field: the
-- readings of one GPU at one instant are one reading.
CREATE OR REPLACE VIEW xid_readings AS
SELECT hostname, uuid, t, t / 86400000 AS day_number, MAX(xid_error) AS xid
FROM pod_samples
WHERE xid_error IS NOT NULL
GROUP BY hostname, uuid, t;

-- Each GPU's last XID reading of each day: what a later day's first reading is compared with.
CREATE OR REPLACE VIEW day_last_xids AS
SELECT hostname, uuid, day_number, xid
FROM (
    SELECT *, ROW_NUMBER() OVER (PARTITION BY hostname, uuid, day_number ORDER BY t DESC, xid DESC) AS reading_rank
    FROM xid_readings
) WHERE reading_rank = 1;

-- Each pod incarnation's first and last active observation of each day on each GPU (MIG
-- instance): its allocated-idle time there is `startup` before the first of all its days,
-- `teardown` after the last, `stall` in between (40_states.sql). Only an observation's earliest
-- sample speaks for it. The incarnation (`pod_key`) is found as 40_states.sql finds it (a pod
-- that fails and is created again under its name on the same GPU is two pods); a pod the
-- capture does not know is its namespace/name.
CREATE OR REPLACE VIEW day_active_bounds AS
SELECT p.hostname, p.uuid, p.mig_instance, COALESCE(r.pod_key, p.namespace || '/' || p.pod) AS pod_key, o.day_number,
       MIN(p.t) AS first_active_t, MAX(p.t) AS last_active_t
FROM settings s
CROSS JOIN observation_starts o
JOIN pod_samples p
  ON (p.hostname IS NOT DISTINCT FROM o.hostname) AND (p.uuid IS NOT DISTINCT FROM o.uuid)
 AND (p.mig_instance IS NOT DISTINCT FROM o.mig_instance) AND (p.t IS NOT DISTINCT FROM o.t)
LEFT JOIN pod_runs r ON r.namespace = p.namespace AND r.pod = p.pod
                    AND CASE WHEN p.pod_uid IS NOT NULL AND r.uid IS NOT NULL THEN r.uid = p.pod_uid
                             ELSE p.t >= r.valid_from_ms AND (r.valid_to_ms IS NULL OR p.t < r.valid_to_ms) END
-- With per-process values a pod is active by its own utilisation (as in 32_spans.sql).
WHERE CASE WHEN o.per_process THEN COALESCE(p.gpu_util, 0) >= s.active_threshold_util ELSE p.active END
  AND p.pod IS NOT NULL AND p.namespace IS NOT NULL
GROUP BY p.hostname, p.uuid, p.mig_instance, COALESCE(r.pod_key, p.namespace || '/' || p.pod), o.day_number;

-- The pods each day's samples name. Not a figure: an incremental ledger run digests what the
-- capture says of these pods (their runs) to tell whether a day it stored still holds.
CREATE OR REPLACE VIEW day_pods AS
SELECT DISTINCT namespace, pod, t / 86400000 AS day_number
FROM pod_samples
WHERE namespace IS NOT NULL AND pod IS NOT NULL;
