# Stand-in for gcr.io/distroless/cc-debian12:nonroot (see standins.sh).
# Distroless images are Debian packages unpacked into a folder, with no
# package manager and no shell, plus passwd entries for root, nobody and
# nonroot (65532). The "cc" flavour adds the C and C++ runtimes to the base
# image's glibc and OpenSSL; all of them are unpacked here, ratekeeper needs
# only glibc and libgcc, so that the image's size is measured as users get it.
ARG BASE
FROM ${BASE} AS unpack
RUN apt-get update \
 && mkdir /debs /rootfs && cd /debs \
 && apt-get download base-files netbase tzdata ca-certificates media-types \
      libc6 libssl3 libgcc-s1 libgomp1 libstdc++6 \
 && for deb in *.deb; do dpkg-deb -x "$deb" /rootfs; done \
 # ca-certificates ships the certificates; its postinst makes the bundle.
 && mkdir -p /rootfs/etc/ssl/certs \
 && cat /rootfs/usr/share/ca-certificates/mozilla/*.crt > /rootfs/etc/ssl/certs/ca-certificates.crt \
 # distroless keeps each package's copyright file, not its docs or manuals.
 && find /rootfs/usr/share/doc -type f ! -name copyright -delete \
 && rm -rf /rootfs/usr/share/man /rootfs/usr/share/info /rootfs/usr/share/lintian \
 && printf 'root:x:0:0:root:/root:/sbin/nologin\nnobody:x:65534:65534:nobody:/nonexistent:/sbin/nologin\nnonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n' > /rootfs/etc/passwd \
 && printf 'root:x:0:\nnobody:x:65534:\ntty:x:5:\nstaff:x:50:\nnonroot:x:65532:\n' > /rootfs/etc/group \
 && mkdir -p /rootfs/home/nonroot /rootfs/tmp /rootfs/root \
 && chown 65532:65532 /rootfs/home/nonroot && chmod 1777 /rootfs/tmp && chmod 700 /rootfs/root

FROM scratch
COPY --from=unpack /rootfs /
ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt
USER 65532
WORKDIR /home/nonroot
