/*
 * Names the COSI binaries derive: upstream's lease-name rule.
 */
#include <string.h>

#include "cosi/cosi.h"

static bool keeps(char ch)
{
    return (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
           ch == '-';
}

char *cosi_lease_name(const char *s)
{
    if (s == NULL)
        s = "";
    size_t len = strlen(s);
    char *out = util_calloc(len + 2, 1);
    size_t o = 0;
    for (size_t i = 0; i < len;) {
        unsigned rune;
        size_t n = util_utf8_decode(s + i, len - i, &rune);
        /* Go's regexp replaces a whole rune (or one invalid byte) by one '-'. */
        if (n == 0)
            n = 1;
        char ch = s[i];
        if (n == 1 && keeps(ch))
            out[o++] = (ch >= 'A' && ch <= 'Z') ? (char)(ch - 'A' + 'a') : ch;
        else
            out[o++] = '-';
        i += n;
    }
    if (o > 0 && out[o - 1] == '-')
        out[o++] = 'X';
    out[o] = '\0';
    return out;
}
