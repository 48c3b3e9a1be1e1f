// pgjdbc against `gpuledger serve`, driven by tests/it/drivers.rs: the metadata calls Metabase
// and DBeaver make when they connect, parameters bound by a PreparedStatement, timestamps read
// by a JVM in another time zone, and a statement's query timeout (pgjdbc sends a cancel
// request). Run as a single source file: java -cp /usr/share/java/postgresql.jar Jdbc.java
//
// Usage: Jdbc.java <port> <password> <team a> <team b> <instant, epoch seconds>
// Prints one JSON object of strings: what each call returned ("ok ..." or "error <SQLSTATE>
// <message>"). It judges nothing: the Rust test compares with psql's answers.

import java.sql.*;
import java.time.Instant;
import java.time.OffsetDateTime;
import java.time.ZoneOffset;
import java.util.*;

public class Jdbc {
    static final Map<String, String> report = new LinkedHashMap<>();

    interface Call { String run() throws Exception; }

    static void check(String name, Call call) {
        try {
            report.put(name, "ok " + call.run());
        } catch (SQLException e) {
            report.put(name, "error " + e.getSQLState() + " " + e.getMessage());
        } catch (Exception e) {
            report.put(name, "error " + e);
        }
    }

    /** The rows of a metadata result: how many, and the values of one column. */
    static String listed(ResultSet rs, String column) throws SQLException {
        List<String> values = new ArrayList<>();
        while (rs.next()) values.add(column == null ? "" : rs.getString(column));
        rs.close();
        return values.size() + (column == null ? "" : " " + String.join(",", values));
    }

    static String first(PreparedStatement ps) throws SQLException {
        try (ResultSet rs = ps.executeQuery()) {
            int n = 0;
            String value = null;
            while (rs.next()) {
                if (n == 0) value = rs.getString(1);
                n++;
            }
            return n + " " + value;
        }
    }

    static String json(String s) {
        StringBuilder b = new StringBuilder("\"");
        for (char c : s.toCharArray()) {
            if (c == '"' || c == '\\') b.append('\\').append(c);
            else if (c < 0x20) b.append(String.format("\\u%04x", (int) c));
            else b.append(c);
        }
        return b.append('"').toString();
    }

    public static void main(String[] args) throws Exception {
        String url = "jdbc:postgresql://127.0.0.1:" + args[0] + "/datafusion";
        String a = args[2], b = args[3];
        long mid = Long.parseLong(args[4]);
        Properties props = new Properties();
        props.setProperty("user", "grafana");
        props.setProperty("password", args[1]);
        props.setProperty("sslmode", "disable");
        try (Connection conn = DriverManager.getConnection(url, props)) {
            // What Metabase does on connect: read-only, autocommit off.
            check("setReadOnly", () -> { conn.setReadOnly(true); return ""; });
            check("setAutoCommit", () -> { conn.setAutoCommit(false); conn.commit(); conn.setAutoCommit(true); return ""; });
            DatabaseMetaData md = conn.getMetaData();
            check("getTables", () -> listed(md.getTables(null, null, "chargeback_monthly", null), "TABLE_NAME"));
            check("getColumns", () -> listed(md.getColumns(null, null, "chargeback_monthly", "%"), "COLUMN_NAME"));
            check("getColumnTypes", () -> listed(md.getColumns(null, null, "gpu_samples", "ts"), "TYPE_NAME"));
            check("getPrimaryKeys", () -> listed(md.getPrimaryKeys(null, null, "chargeback_monthly"), null));
            check("getImportedKeys", () -> listed(md.getImportedKeys(null, null, "chargeback_monthly"), null));
            check("getExportedKeys", () -> listed(md.getExportedKeys(null, null, "chargeback_monthly"), null));
            check("getIndexInfo", () -> listed(md.getIndexInfo(null, null, "chargeback_monthly", false, true), null));
            check("getTypeInfo", () -> listed(md.getTypeInfo(), null));
            check("getSchemas", () -> listed(md.getSchemas(), "TABLE_SCHEM"));
            check("getCatalogs", () -> listed(md.getCatalogs(), null));
            // DBeaver reads pg_class with its namespace as a regnamespace.
            check("regnamespace", () -> first(conn.prepareStatement("SELECT c.relnamespace::regnamespace::text FROM pg_catalog.pg_class c WHERE c.relname = 'chargeback_monthly'")));

            check("any", () -> {
                PreparedStatement ps = conn.prepareStatement("SELECT count(*) AS n FROM chargeback_monthly WHERE team = ANY(?)");
                ps.setArray(1, conn.createArrayOf("text", new String[] {a, b}));
                return first(ps);
            });
            check("limit", () -> {
                PreparedStatement ps = conn.prepareStatement("SELECT team FROM chargeback_monthly ORDER BY team DESC, month LIMIT ?");
                ps.setInt(1, 2);
                return first(ps);
            });
            check("untyped null", () -> {
                PreparedStatement ps = conn.prepareStatement("SELECT count(*) AS n FROM chargeback_monthly WHERE ? IS NULL OR team = ?");
                ps.setNull(1, Types.NULL);
                ps.setString(2, a);
                return first(ps);
            });
            check("subquery", () -> {
                PreparedStatement ps = conn.prepareStatement("SELECT (SELECT count(*) FROM chargeback_monthly WHERE team = ?) AS n");
                ps.setString(1, b);
                return first(ps);
            });
            check("numeric", () -> {
                PreparedStatement ps = conn.prepareStatement("SELECT '0.123456789012345678'::numeric AS n FROM chargeback_monthly WHERE team = ? LIMIT 1");
                ps.setString(1, a);
                return first(ps);
            });
            OffsetDateTime berlin = Instant.ofEpochSecond(mid).atOffset(ZoneOffset.ofHours(2));
            check("timestamptz filter", () -> {
                PreparedStatement ps = conn.prepareStatement("SELECT count(*) AS n FROM gpu_samples WHERE ts >= ?");
                ps.setObject(1, berlin);
                return first(ps);
            });
            // Instants read back in a JVM whose zone is not UTC (run with -Duser.timezone).
            check("timestamptz echo", () -> {
                PreparedStatement ps = conn.prepareStatement("SELECT ?::timestamptz AS t");
                ps.setObject(1, berlin);
                try (ResultSet rs = ps.executeQuery()) {
                    rs.next();
                    return rs.getObject(1, OffsetDateTime.class).toInstant().getEpochSecond() + " " + rs.getMetaData().getColumnTypeName(1);
                }
            });
            check("to_timestamp", () -> {
                PreparedStatement ps = conn.prepareStatement("SELECT to_timestamp_seconds(" + mid + ") AS t");
                try (ResultSet rs = ps.executeQuery()) {
                    rs.next();
                    return rs.getTimestamp(1).toInstant().getEpochSecond() + " " + rs.getMetaData().getColumnTypeName(1);
                }
            });
            check("cancel", () -> {
                try (Statement st = conn.createStatement()) {
                    st.setQueryTimeout(1);
                    long started = System.nanoTime();
                    try {
                        st.executeQuery("SELECT count(*) FROM generate_series(1, 100000000) a CROSS JOIN generate_series(1, 100000000) b").close();
                        return "finished";
                    } catch (SQLException e) {
                        return "cancelled " + e.getSQLState() + " after " + (System.nanoTime() - started) / 1_000_000 + " ms";
                    }
                }
            });
            check("after cancel", () -> first(conn.prepareStatement("SELECT 1")));
        }
        StringBuilder out = new StringBuilder("{");
        for (Map.Entry<String, String> e : report.entrySet()) {
            if (out.length() > 1) out.append(',');
            out.append(json(e.getKey())).append(':').append(json(e.getValue()));
        }
        System.out.println(out.append('}'));
    }
}
