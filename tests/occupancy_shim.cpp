// Differential-test shim: feeds configurations to NVIDIA's cuda_occupancy.h and prints its answers.
// Build: g++ -O2 -std=c++17 -I/usr/local/cuda/include tests/occupancy_shim.cpp -o occupancy_shim
//
// stdin, one query per line, whitespace separated:
//   occ  major minor threadsPerSM blocksUnused regsPerSM regsPerBlock smemPerBlock smemPerSM optin reserved
//        blockSize numRegs staticSmem dynamicSmem carveout optInFlag
//     -> "status blocks limitingFactors limRegs limSmem limWarps limBlocks limBars allocRegs allocSmem"
//   arch major minor
//     -> "status maxBlocks smemUnit regUnit regMaxPerThread subPartitions barrierSlotsPerBlockSlot
//         carveout(0..512 KB step 1 KB, -1 where the header rejects the size)..."
#include <cstdio>
#include <cstring>
#include <iostream>
#include <sstream>
#include <string>

#include <cuda_occupancy.h>

static void query_occ(std::istringstream &in) {
    long major, minor, tpsm, unused, rpsm, rpb, spb, spsm, optin, reserved, bs, nregs, st, dyn, carve, opt;
    in >> major >> minor >> tpsm >> unused >> rpsm >> rpb >> spb >> spsm >> optin >> reserved >> bs >> nregs >> st >>
        dyn >> carve >> opt;
    (void)unused;
    cudaOccDeviceProp p;
    p.computeMajor = (int)major;
    p.computeMinor = (int)minor;
    p.maxThreadsPerBlock = 1024;
    p.maxThreadsPerMultiprocessor = (int)tpsm;
    p.regsPerBlock = (int)rpb;
    p.regsPerMultiprocessor = (int)rpsm;
    p.warpSize = 32;
    p.sharedMemPerBlock = (size_t)spb;
    p.sharedMemPerMultiprocessor = (size_t)spsm;
    p.numSms = 1;
    p.sharedMemPerBlockOptin = (size_t)optin;
    p.reservedSharedMemPerBlock = (size_t)reserved;

    // As cudaOccFuncAttributes(cudaFuncAttributes) builds it: opt-in config, one barrier, no virtual resources.
    // The kernel's MaxDynamicSharedMemorySize is the opt-in maximum minus its static shared memory when it
    // opted in, else the 48 KB default minus static (the value the driver reports for a fresh function).
    cudaOccFuncAttributes a;
    a.maxThreadsPerBlock = 1024;
    a.numRegs = (int)nregs;
    a.sharedSizeBytes = (size_t)st;
    a.partitionedGCConfig = PARTITIONED_GC_OFF;
    a.shmemLimitConfig = FUNC_SHMEM_LIMIT_OPTIN;
    long cap = (opt ? optin : spb) - st;
    a.maxDynamicSharedSizeBytes = (size_t)(cap > 0 ? cap : 0);
    a.numBlockBarriers = 1;
    a.virtualResourceCount = 0;

    cudaOccDeviceState s;
    s.carveoutConfig = (int)carve;

    cudaOccResult r;
    std::memset(&r, 0, sizeof r);
    cudaOccError e = cudaOccMaxActiveBlocksPerMultiprocessor(&r, &p, &a, &s, (int)bs, (size_t)dyn);
    std::printf("%d %d %u %d %d %d %d %d %d %zu\n", (int)e, r.activeBlocksPerMultiprocessor, r.limitingFactors,
                r.blockLimitRegs, r.blockLimitSharedMem, r.blockLimitWarps, r.blockLimitBlocks,
                r.blockLimitBarriers, r.allocatedRegistersPerBlock, r.allocatedSharedMemPerBlock);
}

static void query_arch(std::istringstream &in) {
    int major, minor;
    in >> major >> minor;
    cudaOccDeviceProp p;
    p.computeMajor = major;
    p.computeMinor = minor;
    int blocks = 0, smemUnit = 0, regUnit = 0, regMax = 0, subp = 0, bars = 0;
    int e = cudaOccMaxBlocksPerMultiprocessor(&blocks, &p) | cudaOccSMemAllocationGranularity(&smemUnit, &p) |
            cudaOccRegAllocationGranularity(&regUnit, &p) | cudaOccRegAllocationMaxPerThread(&regMax, &p) |
            cudaOccSubPartitionsPerMultiprocessor(&subp, &p);
    cudaOccFuncAttributes a;
    a.numBlockBarriers = 1;
    e |= cudaOccMaxBlocksPerSMBlockBarrierLimit(&bars, 1, &p, &a);
    std::printf("%d %d %d %d %d %d %d", e, blocks, smemUnit, regUnit, regMax, subp, bars);
    for (int kb = 0; kb <= 512; ++kb) {
        size_t size = (size_t)kb * 1024;
        int st = cudaOccAlignUpShmemSizeVoltaPlus(&size, &p);
        std::printf(" %ld", st == CUDA_OCC_SUCCESS ? (long)size : -1L);
    }
    std::printf("\n");
}

int main() {
    std::string line;
    while (std::getline(std::cin, line)) {
        std::istringstream in(line);
        std::string mode;
        in >> mode;
        if (mode == "occ") {
            query_occ(in);
        } else if (mode == "arch") {
            query_arch(in);
        }
    }
    return 0;
}
