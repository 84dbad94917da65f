#!/usr/bin/env bash
# Starts N agentkv instances and nginx in front of them, all on loopback, until Ctrl-C; with --redis
# also a redis-server as their shared page tier.
# Usage: deploy/local-cluster.sh [-n 2] [-m MODEL.gguf] [--port 8080] [--bin build/agentkv]
#                               [--redis] [--redis-maxmemory 2gb] [-- serve flags...]
# Instances listen on PORT+1 .. PORT+N; nginx on PORT, routing by X-Session-Id (docs/deploy.md);
# Redis on PORT+N+1 (no persistence, allkeys-lru within --redis-maxmemory).
set -euo pipefail
cd "$(dirname "$0")/.."
n=2; model=""; port=8080; bin=build/agentkv; extra=(); redis=0; redis_maxmemory=2gb
while [ $# -gt 0 ]; do
  case "$1" in
    -n) n="$2"; shift 2 ;;
    -m) model="$2"; shift 2 ;;
    --port) port="$2"; shift 2 ;;
    --bin) bin="$2"; shift 2 ;;
    --redis) redis=1; shift ;;
    --redis-maxmemory) redis_maxmemory="$2"; shift 2 ;;
    --) shift; extra=("$@"); break ;;
    *) echo "unknown option $1" >&2; exit 2 ;;
  esac
done
PATH="$PATH:/usr/sbin"
command -v nginx >/dev/null || { echo "nginx is not installed (scripts/setup.sh installs it)" >&2; exit 1; }
work=$(mktemp -d /tmp/agentkv-cluster.XXXXXX)
chmod 755 "$work"  # nginx workers run as nobody: they write large request bodies under it
pids=()
cleanup() { kill "${pids[@]}" 2>/dev/null || true; [ -f "$work/nginx.pid" ] && kill "$(cat "$work/nginx.pid")" 2>/dev/null || true; }
trap cleanup EXIT INT TERM
if [ "$redis" = 1 ]; then
  command -v redis-server >/dev/null || { echo "redis-server is not installed (scripts/setup.sh installs it)" >&2; exit 1; }
  redis_port=$((port + n + 1))
  redis-server --port "$redis_port" --bind 127.0.0.1 --save "" --appendonly no --dir "$work" \
      --maxmemory "$redis_maxmemory" --maxmemory-policy allkeys-lru >"$work/redis.log" 2>&1 &
  pids+=($!)
  for _ in $(seq 200); do (exec 3<>"/dev/tcp/127.0.0.1/$redis_port") 2>/dev/null && break; sleep 0.05; done
  extra=(--cache-redis "redis://127.0.0.1:$redis_port" "${extra[@]}")
fi
servers=""
for i in $(seq 1 "$n"); do
  p=$((port + i))
  $bin serve ${model:+-m "$model"} --port "$p" "${extra[@]}" >"$work/agentkv-$i.log" 2>&1 &
  pids+=($!)
  servers+="    server 127.0.0.1:$p max_fails=1 fail_timeout=10s;\n"
done
# The shipped config with this cluster's ports, and nginx's files under $work.
awk -v servers="$servers" -v port="$port" -v work="$work" '
  /server 127\.0\.0\.1:[0-9]+ max_fails/ { if (!done) { printf "%s", servers; done = 1 } next }
  /listen 127\.0\.0\.1:/ { sub(/[0-9]+;/, port ";") }
  /^http \{/ { print "pid " work "/nginx.pid;"; print "error_log " work "/nginx-error.log;"; print;
               print "  access_log " work "/nginx-access.log;";
               print "  client_body_temp_path " work "/body; proxy_temp_path " work "/proxy;";
               print "  fastcgi_temp_path " work "/fcgi; uwsgi_temp_path " work "/uwsgi; scgi_temp_path " work "/scgi;";
               next }
  { print }' deploy/nginx/agentkv.conf >"$work/nginx.conf"
nginx -p "$work" -c "$work/nginx.conf" -g "daemon off;" &
pids+=($!)
echo "agentkv cluster: nginx on http://127.0.0.1:$port, $n instances on ports $((port + 1))..$((port + n))${redis_port:+, Redis on $redis_port}; logs in $work"
wait
