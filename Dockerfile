# syntax=docker/dockerfile:1
#
# The one `checkout` binary (api, worker, migrate, setup-temporal, dev) in a small image.
# Built by docker-compose.yml; the subcommand is the container's command, e.g. `checkout api`.

FROM golang:1.27.3 AS build
WORKDIR /src
# Static binary: the runtime image has no libc.
ENV CGO_ENABLED=0
# Modules first, so editing code does not re-download them.
COPY go.mod go.sum ./
RUN --mount=type=cache,target=/go/pkg/mod go mod download
COPY . .
RUN --mount=type=cache,target=/go/pkg/mod \
    --mount=type=cache,target=/root/.cache/go-build \
    go build -trimpath -ldflags="-s -w" -o /out/checkout ./cmd/checkout

# distroless/static: CA certificates and tzdata only, no shell; runs as uid 65532.
FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/checkout /checkout
USER nonroot:nonroot
# API (API_ADDR) and worker metrics (WORKER_METRICS_ADDR).
EXPOSE 8080 9091
ENTRYPOINT ["/checkout"]
