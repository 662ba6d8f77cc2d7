# help: installs the C ABI (libreverb.so/.a, reverb.h, pkg-config files) under a prefix
# Installs reverb's C ABI: lib/libreverb.so and lib/libreverb.a, include/reverb.h, and
# lib/pkgconfig/reverb.pc (and reverb-static.pc), under PREFIX (default /usr/local). Then:
#   cc prog.c $(pkg-config --cflags --libs reverb)          the shared library
#   cc prog.c $(pkg-config --cflags --libs reverb-static)   libreverb.a linked in
# (PKG_CONFIG_PATH=PREFIX/lib/pkgconfig when PREFIX is not one pkg-config searches.)
#
#   scripts/reverb-scripts install-capi [--prefix DIR] [--debug | --profile P] [-- CARGO-BUILD-ARGS...]
#     --debug   the dev profile (faster to build)
#     --profile another cargo profile, e.g. ci (what CI's suites use)
#     after --  more arguments for the build (cargo), e.g. --features verbs
prefix=/usr/local profile=release extra=()
while (($#)); do
    case "$1" in
        --prefix) prefix=$2; shift 2 ;;
        --debug) profile=debug; shift ;;
        --profile) profile=$2; shift 2 ;;
        --) shift; extra=("$@"); break ;;
        *) sed -n 's/^# \{0,1\}//p' "$RS_FILE" | sed -n 2,11p >&2; exit 2 ;;
    esac
done
rs_build --package reverb-capi --profile "$profile" -- "${extra[@]}"
flags=("${rs_cargo_profile[@]}")
target=$cargo_out
# What a static link needs besides libreverb.a, as rustc lists it.
static_libs=$(cargo rustc -q -p reverb-capi "${flags[@]}" "${extra[@]}" --crate-type staticlib -- --print native-static-libs 2>&1 |
    sed -n 's/.*native-static-libs: //p' | tail -n 1)
version=$(sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -n 1)
mkdir -p "$prefix/lib/pkgconfig" "$prefix/include"
install -m 0755 "$target/libreverb.so" "$prefix/lib/libreverb.so"
install -m 0644 "$target/libreverb.a" "$prefix/lib/libreverb.a"
install -m 0644 capi/include/reverb.h "$prefix/include/reverb.h"
cat >"$prefix/lib/pkgconfig/reverb.pc" <<PC
prefix=$prefix
libdir=\${prefix}/lib
includedir=\${prefix}/include

Name: reverb
Description: RDMA transport with message logging and in-memory checkpoints (C ABI)
Version: $version
Cflags: -I\${includedir}
Libs: -L\${libdir} -Wl,-rpath,\${libdir} -lreverb
PC
sed -e 's/^Name: reverb$/Name: reverb-static/' -e "s|^Libs: .*|Libs: \${libdir}/libreverb.a $static_libs|" \
    "$prefix/lib/pkgconfig/reverb.pc" >"$prefix/lib/pkgconfig/reverb-static.pc"
echo "installed reverb's C ABI in $prefix (pkg-config: PKG_CONFIG_PATH=$prefix/lib/pkgconfig)" >&2
