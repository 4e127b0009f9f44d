// factor.cuh: a header the tests edit to check that a changed .cuh rebuilds the library.
#pragma once
#define OPF_TEST_FACTOR 1.0f
