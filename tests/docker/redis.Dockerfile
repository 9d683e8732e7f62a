# Stand-in for the official redis image (see standins.sh), from Debian's
# redis-server package. Like the official image it turns protected mode off
# (the container's network is the boundary) and starts redis-server by
# default; `redis-server <file> --sentinel` runs a sentinel.
ARG BASE
FROM ${BASE}
RUN apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends redis-server \
 && rm -rf /var/lib/apt/lists/* \
 && mkdir -p /data && chown redis:redis /data
COPY redis-entrypoint.sh /usr/local/bin/docker-entrypoint.sh
WORKDIR /data
EXPOSE 6379
ENTRYPOINT ["docker-entrypoint.sh"]
CMD ["redis-server"]
