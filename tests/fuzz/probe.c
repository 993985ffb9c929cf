int LLVMFuzzerTestOneInput(const unsigned char *d, unsigned long n) { return 0; }
