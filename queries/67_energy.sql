-- 67  Energy: the GPUs' energy per month, team and state, and what the facility drew for it.
--
--   kwh                = energy of the team's GPU time in that state (40_states.sql: each covered
--                        span's mean power, from the energy counter or else the power reading,
--                        times the team's share of the GPU: N/M of a MIG instance, 1/k of a
--                        shared GPU)
--   facility_kwh       = kwh x pue                                ([energy] pue, default 1)
--   kg_co2e            = facility_kwh x grid_gco2_per_kwh / 1000  (null without grid_gco2_per_kwh)
--   measured_gpu_hours = the GPU-hours whose energy is known; a GPU with neither a counter nor
--                        a power reading has time but no energy
--
-- Energy is reported beside the chargeback, never added to it. GPU-hours are summed as integer
-- GPU-nanoseconds (exact) and turned into hours at the end; kWh are floats (a measurement, not
-- money), summed in whatever order.
CREATE OR REPLACE VIEW energy_monthly AS
SELECT h.month, h.team, h.state,
       CAST(SUM(CAST(h.gpu_ns AS DECIMAL(38, 0))) AS DOUBLE) / 3600000000000.0 AS gpu_hours,
       CAST(SUM(CASE WHEN h.energy_kwh IS NOT NULL THEN CAST(h.gpu_ns AS DECIMAL(38, 0)) ELSE 0 END) AS DOUBLE) / 3600000000000.0 AS measured_gpu_hours,
       COALESCE(SUM(h.energy_kwh), 0) AS kwh,
       COALESCE(SUM(h.energy_kwh), 0) * s.pue AS facility_kwh,
       COALESCE(SUM(h.energy_kwh), 0) * s.pue * s.grid_gco2_per_kwh / 1000.0 AS kg_co2e
FROM settings s
CROSS JOIN gpu_state_hours h
GROUP BY h.month, h.team, h.state, s.pue, s.grid_gco2_per_kwh;
