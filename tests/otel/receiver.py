"""A real OTLP trace receiver for the tests: the OpenTelemetry protobuf
definitions (PyPI's opentelemetry-proto) behind a gRPC server (grpcio) and
an HTTP server for OTLP/HTTP protobuf (POST /v1/traces).

Every span received is written to OUT as one JSON line: its ids in hex, its
parent, name, kind, attributes, links, the service.name of its resource,
and the protocol it came by. Prints "ready GRPC_PORT HTTP_PORT" once both
listen (port 0: a free one).

    python receiver.py OUT GRPC_PORT HTTP_PORT
"""

import json
import sys
import threading
from concurrent import futures
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import grpc
from opentelemetry.proto.collector.trace.v1 import (
    trace_service_pb2,
    trace_service_pb2_grpc,
)

LOCK = threading.Lock()


def value(v):
    kind = v.WhichOneof("value")
    return getattr(v, kind) if kind else None


def write(out, request, protocol):
    lines = []
    for resource_spans in request.resource_spans:
        resource = {a.key: value(a.value) for a in resource_spans.resource.attributes}
        for scope_spans in resource_spans.scope_spans:
            for span in scope_spans.spans:
                lines.append(
                    json.dumps(
                        {
                            "trace_id": span.trace_id.hex(),
                            "span_id": span.span_id.hex(),
                            "parent_span_id": span.parent_span_id.hex(),
                            "name": span.name,
                            "kind": span.kind,
                            "attributes": {a.key: value(a.value) for a in span.attributes},
                            "links": [
                                {"trace_id": l.trace_id.hex(), "span_id": l.span_id.hex()}
                                for l in span.links
                            ],
                            "service_name": resource.get("service.name"),
                            "protocol": protocol,
                        }
                    )
                )
    with LOCK, open(out, "a") as f:
        for line in lines:
            f.write(line + "\n")


class TraceService(trace_service_pb2_grpc.TraceServiceServicer):
    def __init__(self, out):
        self.out = out

    def Export(self, request, context):
        write(self.out, request, "grpc")
        return trace_service_pb2.ExportTraceServiceResponse()


def http_handler(out):
    class Handler(BaseHTTPRequestHandler):
        def do_POST(self):
            body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
            if self.path != "/v1/traces":
                self.send_response(404)
                self.end_headers()
                return
            request = trace_service_pb2.ExportTraceServiceRequest()
            request.ParseFromString(body)
            write(out, request, "http/protobuf")
            answer = trace_service_pb2.ExportTraceServiceResponse().SerializeToString()
            self.send_response(200)
            self.send_header("Content-Type", "application/x-protobuf")
            self.send_header("Content-Length", str(len(answer)))
            self.end_headers()
            self.wfile.write(answer)

        def log_message(self, *args):
            pass

    return Handler


def main():
    out, grpc_port, http_port = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
    trace_service_pb2_grpc.add_TraceServiceServicer_to_server(TraceService(out), server)
    grpc_port = server.add_insecure_port(f"127.0.0.1:{grpc_port}")
    server.start()
    http = ThreadingHTTPServer(("127.0.0.1", http_port), http_handler(out))
    threading.Thread(target=http.serve_forever, daemon=True).start()
    print(f"ready {grpc_port} {http.server_address[1]}", flush=True)
    server.wait_for_termination()


if __name__ == "__main__":
    main()
