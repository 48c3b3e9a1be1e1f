-- 45  Hourly rollups of what DCGM reported, per GPU and per node: what the fleet dashboards
-- plot instead of the raw samples. A month of 1,024 GPUs is about 740K GPU-hours here, against
-- 88M sample rows at a 30 s scrape.
--
-- Not accounting: these are readings (activity, power, temperature, memory, XID errors), not
-- GPU time. Read from the samples that count as readings: an HA pair of scrapers counts once
-- (replica_samples, 30_observations.sql). A GPU's rows at one instant are one reading (a MIG
-- GPU's instances, a shared GPU's per-pod rows, per-process rows that carry only some fields):
-- each field's largest value among them, the device's own where the exporter writes per-pod
-- values beside it; every reading weighs the same in a mean. `date` is the store partition of the samples;
-- `hour` (RFC 3339, `2026-10-01T13:00:00Z`) and `month` are where they fall, as in
-- gpu_state_hours (40_states.sql). `node` is the Kubernetes Node the exporter's Hostname names
-- (hostname_nodes, 40_states.sql), else the Hostname.

-- Per physical GPU and hour. `activity`: engine activity x 100 where the sample has it, else
-- utilisation, in percent (the activity 30_observations.sql reads). `samples` is the number of
-- readings the means are over, so a coarser bucket can weigh each hour by it.
CREATE OR REPLACE VIEW gpu_hourly AS
SELECT r.date,
       to_char(to_timestamp_millis(r.hour_number * 3600000), '%Y-%m-%dT%H:00:00Z') AS hour,
       to_char(to_timestamp_millis(r.hour_number * 3600000), '%Y-%m') AS month,
       r.hostname, COALESCE(hn.node, r.hostname) AS node, r.gpu, r.uuid, r.model_name,
       r.samples, r.activity, r.power_w, r.temp_c, r.max_temp_c, r.fb_used_mib,
       r.xid_samples, r.xid_error, r.first_xid_at, r.last_xid_at
FROM (
    SELECT date, epoch_ms(ts) / 3600000 AS hour_number, hostname, gpu, uuid,
           MIN(model_name) AS model_name,
           COUNT(*) AS samples,
           AVG(COALESCE(engine_active * 100, gpu_util)) AS activity,
           AVG(power_w) AS power_w,
           AVG(temp_c) AS temp_c,
           MAX(temp_c) AS max_temp_c,
           AVG(fb_used_mib) AS fb_used_mib,
           -- XID errors: the samples reporting one, the largest code, when they were seen.
           COUNT(CASE WHEN xid_error > 0 THEN 1 END) AS xid_samples,
           MAX(CASE WHEN xid_error > 0 THEN xid_error END) AS xid_error,
           MIN(CASE WHEN xid_error > 0 THEN ts END) AS first_xid_at,
           MAX(CASE WHEN xid_error > 0 THEN ts END) AS last_xid_at
    FROM (
        SELECT date, ts, hostname, gpu, uuid, MIN(model_name) AS model_name, MAX(engine_active) AS engine_active,
               MAX(gpu_util) AS gpu_util, MAX(power_w) AS power_w, MAX(temp_c) AS temp_c, MAX(fb_used_mib) AS fb_used_mib,
               MAX(xid_error) AS xid_error
        FROM replica_samples
        GROUP BY date, ts, hostname, gpu, uuid
    )
    GROUP BY date, epoch_ms(ts) / 3600000, hostname, gpu, uuid
) r
LEFT JOIN hostname_nodes hn ON hn.hostname = r.hostname;

-- Per node (exporter Hostname) and hour, over its GPUs' hours: `activity` and `temp_c` are the
-- mean over its GPUs (each GPU weighs the same), `power_w` and `fb_used_mib` the sum (what the
-- node's GPUs drew and held together), `max_temp_c` its hottest GPU.
CREATE OR REPLACE VIEW node_hourly AS
SELECT date, hour, month, hostname, MIN(node) AS node,
       COUNT(DISTINCT uuid) AS gpus,
       SUM(samples) AS samples,
       AVG(activity) AS activity,
       SUM(power_w) AS power_w,
       AVG(temp_c) AS temp_c,
       MAX(max_temp_c) AS max_temp_c,
       SUM(fb_used_mib) AS fb_used_mib,
       COUNT(CASE WHEN xid_samples > 0 THEN 1 END) AS gpus_with_xid,
       SUM(xid_samples) AS xid_samples,
       MAX(xid_error) AS xid_error
FROM gpu_hourly
GROUP BY date, hour, month, hostname;
