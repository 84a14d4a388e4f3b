/*
 * llm-ring's stand-in for the miniaudio header that Ollama's vendored
 * llama.cpp (tools/mtmd/mtmd-helper.cpp) includes. The Go module proxy's zip
 * of github.com/ollama/ollama leaves out every directory named "vendor", and
 * Debian packages no miniaudio, so hack/ollama.sh compiles Ollama against
 * this header instead: it declares the few decoder calls mtmd-helper.cpp
 * makes, and each one fails with MA_ERROR. The built server therefore
 * refuses audio input (mtmd reports that the audio could not be decoded);
 * text and images are unaffected. Written for llm-ring; not miniaudio's code.
 */
#ifndef LLM_RING_MINIAUDIO_STANDIN_H
#define LLM_RING_MINIAUDIO_STANDIN_H

#include <stddef.h>
#include <stdint.h>

#ifndef MA_API
#define MA_API static
#endif

typedef uint32_t ma_uint32;
typedef uint64_t ma_uint64;
typedef int ma_result;

#define MA_SUCCESS 0
#define MA_ERROR (-1)

typedef enum { ma_format_unknown = 0, ma_format_f32 = 5 } ma_format;

typedef struct {
    ma_format format;
    ma_uint32 channels;
    ma_uint32 sampleRate;
} ma_decoder_config;

typedef struct {
    ma_decoder_config config;
} ma_decoder;

static inline ma_decoder_config ma_decoder_config_init(ma_format format, ma_uint32 channels, ma_uint32 sampleRate) {
    ma_decoder_config c;
    c.format = format;
    c.channels = channels;
    c.sampleRate = sampleRate;
    return c;
}

static inline ma_result ma_decoder_init_memory(const void *data, size_t size, const ma_decoder_config *config, ma_decoder *decoder) {
    (void)data; (void)size; (void)config; (void)decoder;
    return MA_ERROR;
}

static inline ma_result ma_decoder_get_length_in_pcm_frames(ma_decoder *decoder, ma_uint64 *length) {
    (void)decoder;
    *length = 0;
    return MA_ERROR;
}

static inline ma_result ma_decoder_read_pcm_frames(ma_decoder *decoder, void *out, ma_uint64 frameCount, ma_uint64 *framesRead) {
    (void)decoder; (void)out; (void)frameCount;
    *framesRead = 0;
    return MA_ERROR;
}

static inline ma_result ma_decoder_uninit(ma_decoder *decoder) {
    (void)decoder;
    return MA_SUCCESS;
}

#endif
