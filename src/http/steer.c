/* steer.c -- the rule for giving connections between steered workers (see steer.h). */
#include "http/steer.h"

int steer_margin(int mine, int least)
{
    return 2 + (mine + least) / 16;
}

int steer_moves(int mine, int least)
{
    return mine > least ? (mine - least) / 2 : 0;
}

int steer_take(int i, int m, int k)
{
    if (k <= 0 || i < 0 || i >= m)
        return 0;
    if (k >= m)
        return 1;
    /* Bresenham: take i when floor((i + 1) k / m) steps past floor(i k / m). */
    return (long)(i + 1) * k / m != (long)i * k / m;
}

int steer_may_follow(int mine, int theirs)
{
    return theirs + 1 <= mine - 1;
}

int steer_pick(const int *load, const unsigned char *open, int n, int self)
{
    int best = self;
    for (int i = 0; i < n; i++) {
        if (i != self && open[i] && load[i] < load[best])
            best = i;
    }
    if (best == self)
        return self;
    return load[self] - load[best] > steer_margin(load[self], load[best]) ? best : self;
}
