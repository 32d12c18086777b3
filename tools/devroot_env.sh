# devroot_env.sh — sourced by the GPU machine's check scripts: headers and
# libraries the device lacks come from .devroot/ (Debian packages unpacked with
# dpkg -x on the development machine; not committed).
root=$PWD/.devroot
if [ -d "$root" ]; then
  export C_INCLUDE_PATH=$root/usr/include:$root/usr/include/cjson:$root/usr/include/x86_64-linux-gnu
  export CPLUS_INCLUDE_PATH=$C_INCLUDE_PATH
  export LIBRARY_PATH=$root/usr/lib/x86_64-linux-gnu
  export LD_LIBRARY_PATH=$root/usr/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}
fi
