/* main.c - placeholder until the training loop lands. */
#include <stdio.h>
#include "dtf_config.h"
int main(void) { printf("dtf-train %s\n", DTF_VERSION); return 0; }
