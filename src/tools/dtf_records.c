/* dtf_records.c - placeholder until the data module lands. */
#include <stdio.h>
int main(void) { return 0; }
