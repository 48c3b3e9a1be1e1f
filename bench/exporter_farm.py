#!/usr/bin/env python3
"""Loopback DCGM exporters for the collector benchmark (bench/collector.sh).

Serves N exporters on consecutive ports, each answering /metrics with the scrapes of one 8-GPU
host of a simulated capture (`gpuledger simulate`), rewritten so that every exporter has its own
host name and GPU UUIDs, cycling through the host's scrapes. Timestamps are stripped: like a
real exporter, the scraper stamps the samples.

usage: exporter_farm.py <capture dir> <first port> <count>
"""
import collections
import http.server
import os
import sys
import threading


def templates(capture):
    dcgm = os.path.join(capture, "dcgm")
    best = None
    for host in sorted(os.listdir(dcgm)):
        files = sorted(os.listdir(os.path.join(dcgm, host)))
        gpus = set()
        by_ts = collections.OrderedDict()
        for f in files:
            path = os.path.join(dcgm, host, f)
            stem = os.path.splitext(f)[0]
            with open(path) as fh:
                for line in fh:
                    if not line.strip() or line.startswith("#"):
                        continue
                    if stem.isdigit():
                        ts, sample = stem, line.rstrip("\n")
                    else:
                        sample, ts = line.rstrip("\n").rsplit(" ", 1)
                    by_ts.setdefault(ts, []).append(sample)
                    if 'gpu="' in sample:
                        gpus.add(sample.split('gpu="', 1)[1].split('"', 1)[0])
            if len(by_ts) > 60:
                break
        if best is None or len(gpus) > best[0]:
            best = (len(gpus), host, list(by_ts.values())[:40])
    return best


def main():
    capture, first, count = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    gpus, host, scrapes = templates(capture)
    bodies = []
    for i in range(count):
        name = f"bench-node-{i:03d}"
        per = []
        for s in scrapes:
            text = "\n".join(s) + "\n"
            text = text.replace(f'Hostname="{host}"', f'Hostname="{name}"').replace('UUID="GPU-', f'UUID="GPU-{i:03d}-')
            per.append(text.encode())
        bodies.append(per)
    size, lines = len(bodies[0][0]), bodies[0][0].count(b"\n")
    sys.stderr.write(f"{count} exporters of {gpus} GPUs ({host}), {len(scrapes)} distinct scrapes, "
                     f"{size} bytes and {lines} samples per scrape\n")

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            i = self.server.index
            n = self.server.served
            self.server.served += 1
            body = bodies[i][n % len(bodies[i])]
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    servers = []
    for i in range(count):
        srv = http.server.ThreadingHTTPServer(("127.0.0.1", first + i), Handler)
        srv.index, srv.served = i, 0
        servers.append(srv)
        threading.Thread(target=srv.serve_forever, daemon=True).start()
    sys.stderr.write("ready\n")
    sys.stderr.flush()
    threading.Event().wait()


if __name__ == "__main__":
    main()
