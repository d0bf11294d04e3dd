"""What rayton reports about the requests it serves, Ray-free: statistics (Triton's
statistics extension and the counters behind its metrics), request tracing (sampling, the
trace settings, the trace file and the OpenTelemetry exporter), Triton's log settings and the
``rayton status`` document. The serving code records into it; nothing here imports it back."""
