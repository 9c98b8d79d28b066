// Exact miss counts of one libCacheSim policy on an oracleGeneral trace, for
// policies its `cachesim` has no name for (SR_LRU, CR_LFU, MRU) and, as a
// check of this driver, some it has (FIFO_Merge, RandomTwo, RandomLRU). The
// loop is cachesim's (`profiler/simulator.c` `_simulate`): the random
// generator reset to 0 before each run, one `get` a request.
//
// Build against a libCacheSim build tree (commit aa0fc40 for the numbers in
// crates/cairn-sim/tests/libcachesim_agreement.rs), e.g. with SRC the checkout
// and B=$SRC/_build/libCacheSim:
//   gcc -O2 -I$SRC/libCacheSim/include $(pkg-config --cflags glib-2.0) \
//     bench/libcachesim-driver.c -o lcsdrv $B/cache/libcachelib.a \
//     $B/cache/eviction/libevictionC.a $B/cache/eviction/libevictionCPP.a \
//     $B/traceReader/libtraceReader.a $B/dataStructure/libdataStructure.a \
//     $B/dataStructure/hash/libds_hash.a $B/utils/libutils.a \
//     $B/cache/libcachelib.a -lglib-2.0 -lzstd -lstdc++ -lm -lpthread
// Usage: lcsdrv TRACE ALGO obj|byte SIZE... (obj: every size 1, as
// `--ignore-obj-size 1`; SIZE in objects or bytes).
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include "libCacheSim.h"
#include "libCacheSim/evictionAlgo.h"
void set_rand_seed(uint64_t seed);

int main(int argc, char **argv) {
  if (argc < 5) { fprintf(stderr, "usage: TRACE ALGO obj|byte SIZE...\n"); return 2; }
  const char *algo = argv[2];
  bool ignore = strcmp(argv[3], "obj") == 0;
  for (int i = 4; i < argc; i++) {
    reader_init_param_t rp = default_reader_init_params();
    rp.ignore_obj_size = ignore;
    reader_t *reader = open_trace(argv[1], ORACLE_GENERAL_TRACE, &rp);
    common_cache_params_t cp = default_common_cache_params();
    cp.cache_size = strtoull(argv[i], NULL, 10);
    cp.hashpower = 24; // cachesim's (cache_init.h)
    cache_t *cache;
    if (!strcasecmp(algo, "sr_lru")) cache = SR_LRU_init(cp, NULL);
    else if (!strcasecmp(algo, "cr_lfu")) cache = CR_LFU_init(cp, NULL);
    else if (!strcasecmp(algo, "mru")) cache = MRU_init(cp, NULL);
    else if (!strcasecmp(algo, "fifomerge")) cache = FIFO_Merge_init(cp, NULL);
    else if (!strcasecmp(algo, "randomtwo")) cache = RandomTwo_init(cp, NULL);
    else if (!strcasecmp(algo, "randomlru")) cache = RandomLRU_init(cp, NULL);
    else { fprintf(stderr, "unknown %s\n", algo); return 2; }
    set_rand_seed(0);
    request_t *req = new_request();
    uint64_t n = 0, miss = 0;
    while (read_one_req(reader, req) == 0) {
      n++;
      if (!cache->get(cache, req)) miss++;
    }
    printf("%s %s %llu: %llu misses of %llu\n", algo, argv[3], (unsigned long long)cp.cache_size,
           (unsigned long long)miss, (unsigned long long)n);
    cache->cache_free(cache);
    free_request(req);
    close_trace(reader);
  }
  return 0;
}
