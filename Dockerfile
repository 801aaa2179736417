# The election image: the static binary alone, run as a non-root user. For
# agent, dashboard, status and the other commands that need nothing else:
#   docker build -t election .
#   docker run --rm election status --server nats://nats:4222
# For election run, put the binary into your program's own image instead:
#   COPY --from=election /election /usr/local/bin/election
#   ENTRYPOINT ["election", "run", "--key", "reports", "--"]
#   CMD ["/app/reports"]
FROM golang:1.26 AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
ARG VERSION=devel
RUN CGO_ENABLED=0 go build -trimpath -ldflags "-s -w -X github.com/kvelect/election/cmd/election/internal/cli.buildVersion=${VERSION}" -o /election ./cmd/election

FROM scratch
COPY --from=build /etc/ssl/certs/ca-certificates.crt /etc/ssl/certs/
COPY --from=build /election /election
USER 65532:65532
ENTRYPOINT ["/election"]
