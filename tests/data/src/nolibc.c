/* A program without a C library (-nostdlib -static): its own _start, so
   that a 32-bit build needs no 32-bit libc on the machine. */
static int work(int n)
{
    int s = 0;
    for (int i = 0; i < n; i++)
        s += i * i;
    return s;
}

int leaf(int n)
{
    return work(n) + 1;
}

void _start(void)
{
    for (;;)
        leaf(1000);
}
