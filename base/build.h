// base/build.h — what kind of build this is, for the few places that must
// tell a sanitizer build (the test suite's) from the one users run.
//
// RG_BUILD_SANITIZED is 1 under AddressSanitizer (gcc defines
// __SANITIZE_ADDRESS__, clang answers __has_feature), else 0.
#ifndef RG_BASE_BUILD_H
#define RG_BASE_BUILD_H

#if defined(__SANITIZE_ADDRESS__)
#define RG_BUILD_SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define RG_BUILD_SANITIZED 1
#endif
#endif
#ifndef RG_BUILD_SANITIZED
#define RG_BUILD_SANITIZED 0
#endif

// A tag for files one build writes that another must not read as its own
// (calibrations measure this build's kernels): "-asan" or "".
#define RG_BUILD_TAG (RG_BUILD_SANITIZED ? "-asan" : "")

#endif  // RG_BASE_BUILD_H
