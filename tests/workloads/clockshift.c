/* An LD_PRELOAD library that moves only the wall clock.
 *
 * clock_gettime(CLOCK_REALTIME[_COARSE]) and gettimeofday() return the real
 * time plus the number of seconds in the file $CLOCKSHIFT_FILE (read at
 * every call, so a test steps the clock by rewriting it). Monotonic and
 * boottime clocks, sleeps and timeouts are left alone: a wall-clock step as
 * a process sees it when an administrator or NTP sets the clock.
 * (Debian's libfaketime 0.9.10 with FAKETIME_DONT_FAKE_MONOTONIC=1 fails
 * Python's time.sleep with EINVAL and can stretch select() timeouts.)
 *
 * cc -O2 -shared -fPIC -o clockshift.so clockshift.c
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <fcntl.h>
#include <stdlib.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

static long long shift_ns(void)
{
	const char *path = getenv("CLOCKSHIFT_FILE");
	char buf[64];
	ssize_t n;
	int fd;

	if (!path)
		return 0;
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return 0;
	n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	if (n <= 0)
		return 0;
	buf[n] = 0;
	return (long long)(strtod(buf, NULL) * 1e9);
}

static void add(struct timespec *ts, long long ns)
{
	long long total = (long long)ts->tv_sec * 1000000000LL + ts->tv_nsec + ns;

	ts->tv_sec = total / 1000000000LL;
	ts->tv_nsec = total % 1000000000LL;
}

int clock_gettime(clockid_t id, struct timespec *ts)
{
	static int (*real)(clockid_t, struct timespec *);
	int r;

	if (!real)
		real = (int (*)(clockid_t, struct timespec *))dlsym(RTLD_NEXT, "clock_gettime");
	r = real(id, ts);
	if (r == 0 && (id == CLOCK_REALTIME || id == CLOCK_REALTIME_COARSE))
		add(ts, shift_ns());
	return r;
}

int gettimeofday(struct timeval *tv, void *tz)
{
	struct timespec ts;

	(void)tz;
	if (clock_gettime(CLOCK_REALTIME, &ts) != 0)
		return -1;
	if (tv) {
		tv->tv_sec = ts.tv_sec;
		tv->tv_usec = ts.tv_nsec / 1000;
	}
	return 0;
}
