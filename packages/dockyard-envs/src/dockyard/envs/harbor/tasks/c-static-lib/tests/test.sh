#!/bin/bash
# Held-out checks of the Makefile; reward = passed / total, 0 when the build itself fails.
cd /app
# the task says not to change the C sources: they must be the shipped ones
if ! sha256sum -c --quiet >/logs/verifier/log.txt 2>&1 <<'SUMS'
e962456ae60112dab8e41791fd2b49ffb0ecd20458ee252674aba470eadae9f5  include/mini.h
3b4db3b17031128a93d2b6c9803e50b543ee769ad85da5f2d36ce9b41f0769e1  src/vec.c
abb1ef09b82dbca50ce963c91630c016f31bc32ba0b2a6ce15821faed1026dca  src/strutil.c
b5fadb1edc5c219badfdd703bb24d3c20c31ce0b9e34e58f934fc0817c75b852  app/main.c
7b29d9b31210d7c0d0a3d512c940e71d64a69ee4aa7df4f828bda8e12ab0b77b  tests/test_mini.c
SUMS
then
  echo 0 > /logs/verifier/reward.txt
  exit 0
fi
L=/logs/verifier/log.txt  # appended to
pass=0; total=0
check() { # NAME CMD...: run CMD, count it
  total=$((total + 1))
  if "${@:2}" >>"$L" 2>&1; then pass=$((pass + 1)); echo "ok   $1" >>"$L"; else echo "FAIL $1" >>"$L"; fi
}
sleep_tick() { sleep 1.1; }  # make compares mtimes; be safe on 1-second file systems

make clean >>"$L" 2>&1
rm -rf build bin
if ! make >>"$L" 2>&1 || [ ! -f build/libmini.a ] || [ ! -x bin/app ]; then
  echo "FAIL make did not build build/libmini.a and bin/app" >>"$L"
  echo 0 > /logs/verifier/reward.txt
  exit 0
fi
members() { [ "$(ar t build/libmini.a | xargs -n1 basename | sort | tr '\n' ' ')" = "strutil.o vec.o " ]; }
check "archive holds exactly vec.o strutil.o" members
check "archive defines the symbols" bash -c 'nm build/libmini.a | grep -q " T vec_push" && nm build/libmini.a | grep -q " T str_reverse"'
app_out() { [ "$(bin/app hello 3 9 4)" = "$(printf 'count=3 sum=16 max=9\nolleh')" ] && [ "$(bin/app abc -5 -2)" = "$(printf 'count=2 sum=-7 max=-2\ncba')" ]; }
check "bin/app behaviour" app_out
check "second make is a no-op (make -q)" make -q
sleep_tick; touch src/strutil.c
check "editing a source: out of date" bash -c '! make -q'
check "editing a source: library rebuilt, bin/app relinked" bash -c \
  'make && make -q && [ build/strutil.o -nt src/strutil.c ] && [ build/libmini.a -nt src/strutil.c ] && [ bin/app -nt src/strutil.c ]'
sleep_tick; touch include/mini.h
check "editing the header: out of date" bash -c '! make -q'
check "editing the header: everything rebuilt" bash -c \
  'make && for f in build/vec.o build/strutil.o build/libmini.a bin/app; do [ $f -nt include/mini.h ] || exit 1; done'
make >>"$L" 2>&1
test_ok() { make test >/tmp/t.out 2>&1; rc=$?; cat /tmp/t.out; [ $rc = 0 ] && grep -q "all tests passed" /tmp/t.out; }
check "make test passes" test_ok
cp tests/test_mini.c /tmp/test_mini.c.orig
sleep_tick; cp /tests/test_fail.c tests/test_mini.c
check "make test fails when the tests fail" bash -c '! make test'
cp /tmp/test_mini.c.orig tests/test_mini.c
check "make clean removes the outputs" bash -c 'make clean && [ ! -e build/libmini.a ] && [ ! -e bin/app ] && [ -z "$(find . -name "*.o" -o -name "*.a")" ]'
check "make -j4 from clean" bash -c 'make -j4 && [ -f build/libmini.a ] && [ -x bin/app ]'
python3 -c "print(round($pass / $total, 4))" > /logs/verifier/reward.txt
