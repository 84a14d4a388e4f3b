# syntax=docker/dockerfile:1
# One image for every llm-ring subcommand: the Kubernetes manifests run
# `llm-ring router` and (sim overlay) `llm-ring replica` from it.
#   docker build -t llm-ring:0.1.0 .
# Build stage: a static binary (no cgo), reproducible paths.
FROM golang:1.26.8 AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN --mount=type=cache,target=/go/pkg/mod go mod download
COPY . .
RUN --mount=type=cache,target=/go/pkg/mod --mount=type=cache,target=/root/.cache/go-build \
    CGO_ENABLED=0 go build -trimpath -ldflags="-s -w" -o /out/llm-ring ./cmd/llm-ring

# Runtime: distroless static, no shell, non-root (uid 65532).
FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/llm-ring /llm-ring
USER 65532:65532
EXPOSE 8080
ENTRYPOINT ["/llm-ring"]
CMD ["help"]
