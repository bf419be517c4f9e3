#!/bin/sh
# OpenTelemetry's protobuf definitions and SDK: tests/test_export_otel.py parses `export otel` output
# with them (a real OTLP consumer). Test-only: the import and export code never imports them.
set -e
python3 -c "import opentelemetry.proto.collector.trace.v1.trace_service_pb2, opentelemetry.sdk.trace, opentelemetry.exporter.otlp.proto.common" 2>/dev/null && exit 0
python3 -m pip install --quiet --disable-pip-version-check opentelemetry-proto opentelemetry-sdk opentelemetry-exporter-otlp-proto-common
