# A round-robin nginx in front of local servers, for the CI's cluster passes (.ci/lib.sh's
# ci_cluster_up, .ci/conformance.sh). Source it; it defines:
#   nginx_install                 installs Debian's nginx-light when no nginx is on the machine
#   nginx_round_robin DIR PORT UPSTREAM_PORT…
#                                 starts nginx (config, logs and temp files in DIR) on
#                                 127.0.0.1:PORT, balancing each request over the upstream ports
#                                 with no affinity; sets NGINX_PID. Each upstream's address, method,
#                                 path and status go to DIR/upstream.log.
# The settings are the ones the README's Deployment section names for a balancer in front of
# Breeze: no response buffering (SSE), WebSocket upgrades passed (agents), long reads.
# shellcheck shell=bash

nginx_install() {
  if ! command -v nginx >/dev/null && [ ! -x /usr/sbin/nginx ]; then
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq nginx-light >/dev/null
  fi
}

nginx_round_robin() {
  local dir=$1 port=$2; shift 2
  local nginx_bin upstreams="" upstream
  nginx_bin=$(command -v nginx || echo /usr/sbin/nginx)
  for upstream in "$@"; do
    upstreams+="    server 127.0.0.1:$upstream max_fails=0;"$'\n'
  done
  mkdir -p "$dir"
  : >"$dir/upstream.log"
  cat >"$dir/nginx.conf" <<NGINX
worker_processes 1;
pid $dir/nginx.pid;
error_log $dir/error.log warn;
events { worker_connections 1024; }
http {
  access_log off;
  client_body_temp_path $dir/body;
  proxy_temp_path $dir/proxy;
  log_format upstream '\$upstream_addr \$request_method \$uri \$status';
  map \$http_upgrade \$connection_upgrade { default upgrade; '' ''; }
  upstream breeze {
$upstreams    keepalive 32;
  }
  server {
    listen 127.0.0.1:$port;
    access_log $dir/upstream.log upstream;
    location / {
      proxy_pass http://breeze;
      proxy_http_version 1.1;
      proxy_set_header Host \$http_host;
      proxy_set_header Upgrade \$http_upgrade;
      proxy_set_header Connection \$connection_upgrade;
      proxy_buffering off;
      proxy_request_buffering off;
      proxy_read_timeout 1h;
    }
  }
}
NGINX
  "$nginx_bin" -p "$dir" -c "$dir/nginx.conf" -g 'daemon off;' &
  NGINX_PID=$!
}
