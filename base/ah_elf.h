/* ah_elf.h: reading a loaded object's dynamic symbol table (ah_elf.c), for the lookups the
 * shim must make without the loader: the real dlsym (rdma_verbs.c) and whether an object defines
 * NCCL (shim_real.c). */
#ifndef AH_ELF_H
#define AH_ELF_H

#include <link.h>
#include <stdint.h>

/* Code that can run inside the first dlsym of the process — which may come from a sanitizer
 * runtime setting up its interceptors, before it can serve instrumented code or intercepted calls
 * such as strcmp and dl_iterate_phdr — is built without sanitizers and calls nothing but itself. */
#define AH_EARLY __attribute__((no_sanitize("address", "undefined")))

/* 1 when the two strings are equal (strcmp without calling it). */
int ah_elf_streq(const char *a, const char *b);

/* The address of `name` defined in the object loaded at `base` with dynamic section `dyn`, found
 * through its DT_GNU_HASH or DT_HASH table; NULL when the object does not define it.
 * Note that this takes no lock and ignores symbol versions: it answers "does this object define
 * the name", not "what would the loader bind". */
void *ah_elf_lookup(uintptr_t base, const ElfW(Dyn) * dyn, const char *name);

#endif
