/* Server job table (server/jobs.h): update by (job, rank), expiry after the documented time,
 * bounded size with the least recently reported dropped, JSON and metrics renderings. */
#include "jobs.h"
#include "testlib.h"

#include <cjson/cJSON.h>
#include <string.h>

static dsc_report_req_t report(const char *job, uint32_t rank, uint32_t stall_ppm) {
    dsc_report_req_t r = {
        .job = {job, (uint16_t)strlen(job)},
        .dataset = {"c4-en", 5},
        .rank = rank,
        .world_size = 4,
        .stall_ppm = stall_ppm,
        .samples_per_s = 1000 + rank,
        .bytes_per_s = 4096000,
        .bottleneck = DSC_BOTTLENECK_DECODE,
        .verdict = {"raise decode_threads from 2 to 4", 32},
    };
    return r;
}

static void test_update_and_expiry(void) {
    CHECK(DSC_JOB_EXPIRY_S >= 60);
    dsc_jobs_t *jobs = NULL;
    REQUIRE(dsc_jobs_create(0, 0, &jobs) == 0);
    CHECK(dsc_jobs_expiry(jobs) == DSC_JOB_EXPIRY_S);
    dsc_report_req_t a0 = report("llama", 0, 250000), a1 = report("llama", 1, 500000);
    CHECK_EQ_INT(dsc_jobs_report(jobs, &a0, "127.0.0.1:5000", NULL, 100.0), 0);
    CHECK_EQ_INT(dsc_jobs_report(jobs, &a1, NULL, NULL, 100.0), 0);
    a0.stall_ppm = 100000;
    CHECK_EQ_INT(dsc_jobs_report(jobs, &a0, "127.0.0.1:5000", NULL, 110.0), 0); /* update */
    dsc_job_info_t out[8];
    CHECK_EQ_INT(dsc_jobs_snapshot(jobs, 111.0, out, 8), 2);
    CHECK(strcmp(out[0].job, "llama") == 0 && out[0].rank == 0 && out[1].rank == 1);
    CHECK(out[0].stall_fraction > 0.0999 && out[0].stall_fraction < 0.1001);
    CHECK_EQ_INT(out[0].reports, 2);
    CHECK(out[0].first_seen == 100.0 && out[0].last_report == 110.0);
    CHECK(strcmp(out[0].peer, "127.0.0.1:5000") == 0 && out[1].peer[0] == '\0');
    CHECK(strcmp(out[1].verdict, "raise decode_threads from 2 to 4") == 0);
    /* Rank 1 last reported at 100: still listed at 100 + expiry, gone just after. */
    CHECK_EQ_INT(dsc_jobs_snapshot(jobs, 100.0 + DSC_JOB_EXPIRY_S, out, 8), 2);
    CHECK_EQ_INT(dsc_jobs_snapshot(jobs, 100.5 + DSC_JOB_EXPIRY_S, out, 8), 1);
    CHECK_EQ_INT(out[0].rank, 0);
    CHECK_EQ_INT(dsc_jobs_snapshot(jobs, 111.0 + DSC_JOB_EXPIRY_S, out, 8), 0);
    dsc_jobs_destroy(jobs);
    dsc_jobs_destroy(NULL);
}

static void test_bounded(void) {
    dsc_jobs_t *jobs = NULL;
    CHECK_EQ_INT(dsc_jobs_create(DSC_JOBS_MAX + 1, 0, &jobs), DSC_EINVAL);
    REQUIRE(dsc_jobs_create(4, 60, &jobs) == 0);
    char names[6][16];
    for (int i = 0; i < 6; i++) {
        snprintf(names[i], sizeof names[i], "job%d", i);
        dsc_report_req_t r = report(names[i], 0, 1000);
        CHECK_EQ_INT(dsc_jobs_report(jobs, &r, NULL, NULL, 10.0 + i), i >= 4);
    }
    CHECK_EQ_INT(dsc_jobs_dropped(jobs), 2);
    dsc_job_info_t out[8];
    CHECK_EQ_INT(dsc_jobs_snapshot(jobs, 16.0, out, 8), 4);
    CHECK(strcmp(out[0].job, "job2") == 0 && strcmp(out[3].job, "job5") == 0);
    /* cap smaller than the live count: the count is still the live count. */
    CHECK_EQ_INT(dsc_jobs_snapshot(jobs, 16.0, out, 2), 4);
    dsc_jobs_destroy(jobs);
}

static void test_renderings(void) {
    dsc_jobs_t *jobs = NULL;
    REQUIRE(dsc_jobs_create(0, 0, &jobs) == 0);
    dsc_report_req_t r = report("bert/run-1", 2, 333000);
    dsc_jobs_report(jobs, &r, "10.0.0.9:4242", NULL, 50.0);
    char *json = dsc_jobs_json(jobs, 53.0);
    REQUIRE(json != NULL);
    cJSON *arr = cJSON_Parse(json);
    REQUIRE(cJSON_IsArray(arr) && cJSON_GetArraySize(arr) == 1);
    cJSON *o = cJSON_GetArrayItem(arr, 0);
    CHECK(strcmp(cJSON_GetObjectItem(o, "job")->valuestring, "bert/run-1") == 0);
    CHECK(strcmp(cJSON_GetObjectItem(o, "bottleneck")->valuestring, "decode") == 0);
    CHECK(cJSON_GetObjectItem(o, "stall")->valuedouble > 0.332);
    CHECK(cJSON_GetObjectItem(o, "age_s")->valuedouble == 3.0);
    CHECK(cJSON_GetObjectItem(o, "rank")->valueint == 2);
    CHECK(cJSON_IsFalse(cJSON_GetObjectItem(o, "finished")));
    cJSON_Delete(arr);
    free(json);
    /* The last report of a closing loader marks the entry finished. */
    r.flags = DSC_REPORT_FLAG_FINISHED;
    dsc_jobs_report(jobs, &r, "10.0.0.9:4242", NULL, 50.0);
    r.flags = 0;
    json = dsc_jobs_json(jobs, 53.0);
    REQUIRE(json != NULL);
    arr = cJSON_Parse(json);
    REQUIRE(cJSON_IsArray(arr) && cJSON_GetArraySize(arr) == 1);
    CHECK(cJSON_IsTrue(cJSON_GetObjectItem(cJSON_GetArrayItem(arr, 0), "finished")));
    cJSON_Delete(arr);
    free(json);
    char *text = dsc_jobs_metrics_text(jobs, 53.0, 1);
    REQUIRE(text != NULL);
    CHECK(strstr(text, "dscache_jobs 1\n") != NULL);
    CHECK(strstr(text,
                 "dscache_job_stall_fraction{job=\"bert/run-1\",rank=\"2\",dataset=\"c4-en\"} "
                 "0.333\n") != NULL);
    CHECK(strstr(text, "dscache_job_bottleneck{job=\"bert/run-1\",rank=\"2\",dataset=\"c4-en\","
                       "stage=\"decode\"} 1\n") != NULL);
    free(text);
    /* Empty table: the gauges are there with no series. */
    text = dsc_jobs_metrics_text(jobs, 50.0 + DSC_JOB_EXPIRY_S + 1, 1);
    REQUIRE(text != NULL);
    CHECK(strstr(text, "dscache_jobs 0\n") != NULL);
    CHECK(strstr(text, "dscache_job_stall_fraction{") == NULL);
    free(text);
    dsc_jobs_destroy(jobs);
}

/* Issue 20: one credential reporting 70 jobs pushes no other credential's jobs out; each holds
 * at most its share; without names the metrics carry no job or dataset label. */
static void test_share(void) {
    dsc_jobs_t *jobs = NULL;
    REQUIRE(dsc_jobs_create(0, 1000, &jobs) == 0);
    CHECK_EQ_INT(dsc_jobs_share(jobs), DSC_JOBS_PER_OWNER);
    dsc_report_req_t b0 = report("team-b/train", 0, 1000), b1 = report("team-b/train", 1, 1000);
    CHECK_EQ_INT(dsc_jobs_report(jobs, &b0, NULL, "bob", 1.0), 0);
    CHECK_EQ_INT(dsc_jobs_report(jobs, &b1, NULL, "bob", 1.0), 0);
    char name[32];
    for (int i = 0; i < 70; i++) {
        snprintf(name, sizeof name, "flood-%d", i);
        dsc_report_req_t r = report(name, 0, 1000);
        dsc_jobs_report(jobs, &r, NULL, "alice", 2.0 + i);
    }
    dsc_job_info_t out[DSC_JOBS_MAX];
    uint32_t n = dsc_jobs_snapshot(jobs, 80.0, out, DSC_JOBS_MAX);
    uint32_t bob = 0, alice = 0;
    for (uint32_t i = 0; i < n; i++) {
        bob += strcmp(out[i].owner, "bob") == 0;
        alice += strcmp(out[i].owner, "alice") == 0;
    }
    CHECK_EQ_INT(bob, 2);
    CHECK_EQ_INT(alice, DSC_JOBS_PER_OWNER);
    /* alice's newest 16 are the ones kept */
    int newest = 0;
    for (uint32_t i = 0; i < n; i++)
        newest += strcmp(out[i].job, "flood-69") == 0;
    CHECK_EQ_INT(newest, 1);
    /* A full table: the owner with the most entries gives way, not the smaller one. */
    dsc_jobs_set_share(jobs, 64);
    for (int i = 0; i < 70; i++) {
        snprintf(name, sizeof name, "again-%d", i);
        dsc_report_req_t r = report(name, 0, 1000);
        dsc_jobs_report(jobs, &r, NULL, "alice", 100.0 + i);
    }
    n = dsc_jobs_snapshot(jobs, 170.0, out, DSC_JOBS_MAX);
    CHECK_EQ_INT(n, DSC_JOBS_MAX);
    bob = 0;
    for (uint32_t i = 0; i < n; i++)
        bob += strcmp(out[i].owner, "bob") == 0;
    CHECK_EQ_INT(bob, 2);
    dsc_jobs_count_refused(jobs);
    char *text = dsc_jobs_metrics_text(jobs, 170.0, 0);
    REQUIRE(text != NULL);
    CHECK(strstr(text, "dscache_job_reports_refused_total 1\n") != NULL);
    CHECK(strstr(text, "job=") == NULL && strstr(text, "dataset=") == NULL);
    free(text);
    dsc_jobs_destroy(jobs);
}

/* The straggler trailers of the live entries, summed (STAT "server"."stragglers", /metrics
 * dscache_straggler_*); a report without one keeps the entry's last figures; an expired entry
 * takes its share along; a finished loader holds the server slow no more. */
static void test_hedge_sums(void) {
    dsc_jobs_t *jobs = NULL;
    REQUIRE(dsc_jobs_create(0, 60, &jobs) == 0);
    dsc_jobs_hedge_t hs;
    dsc_jobs_hedge(jobs, 10.0, &hs);
    CHECK_EQ_INT(hs.loaders, 0);
    dsc_report_req_t a = report("llama", 0, 1000), b = report("llama", 1, 1000);
    dsc_report_req_t c = report("bert", 0, 1000); /* an older loader: no trailer */
    a.has_hedge = b.has_hedge = 1;
    a.hedge = (dsc_report_hedge_t){.flags = DSC_REPORT_HEDGE_SLOW,
                                   .hedges = 3,
                                   .hedges_won = 2,
                                   .hedge_bytes = 300,
                                   .wasted_bytes = 30,
                                   .slow_marks = 1,
                                   .excused = 4};
    b.hedge = (dsc_report_hedge_t){.hedges = 5, .hedge_bytes = 500, .slow_marks = 2};
    dsc_jobs_report(jobs, &a, NULL, NULL, 10.0);
    dsc_jobs_report(jobs, &b, NULL, NULL, 20.0);
    dsc_jobs_report(jobs, &c, NULL, NULL, 20.0);
    dsc_jobs_hedge(jobs, 21.0, &hs);
    CHECK_EQ_INT(hs.loaders, 2);
    CHECK_EQ_INT(hs.slow_now, 1);
    CHECK_EQ_INT(hs.sum.hedges, 8);
    CHECK_EQ_INT(hs.sum.hedges_won, 2);
    CHECK_EQ_INT(hs.sum.hedge_bytes, 800);
    CHECK_EQ_INT(hs.sum.wasted_bytes, 30);
    CHECK_EQ_INT(hs.sum.slow_marks, 3);
    CHECK_EQ_INT(hs.sum.excused, 4);
    /* Rank 0 again without a trailer (a connection not granted it): its figures stay. */
    dsc_report_req_t a2 = report("llama", 0, 1000);
    dsc_jobs_report(jobs, &a2, NULL, NULL, 30.0);
    dsc_jobs_hedge(jobs, 31.0, &hs);
    CHECK_EQ_INT(hs.sum.hedges, 8);
    /* Finished: no longer holds it slow. */
    a.flags = DSC_REPORT_FLAG_FINISHED;
    dsc_jobs_report(jobs, &a, NULL, NULL, 40.0);
    dsc_jobs_hedge(jobs, 41.0, &hs);
    CHECK_EQ_INT(hs.slow_now, 0);
    CHECK_EQ_INT(hs.sum.slow_marks, 3);
    char *text = dsc_jobs_metrics_text(jobs, 41.0, 0);
    REQUIRE(text != NULL);
    CHECK(strstr(text, "\ndscache_straggler_slow_marks 3\n") != NULL);
    CHECK(strstr(text, "\ndscache_straggler_hedges 8\n") != NULL);
    CHECK(strstr(text, "\ndscache_straggler_loaders 2\n") != NULL);
    free(text);
    char *json = dsc_jobs_stat_add(jobs, strdup("{}"), 41.0, 1, 2);
    REQUIRE(json != NULL);
    cJSON *root = cJSON_Parse(json);
    const cJSON *st = cJSON_GetObjectItemCaseSensitive(
        cJSON_GetObjectItemCaseSensitive(root, "server"), "stragglers");
    CHECK(cJSON_IsObject(st));
    CHECK(cJSON_GetNumberValue(cJSON_GetObjectItemCaseSensitive(st, "hedge_bytes")) == 800);
    const cJSON *j0 = cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(root, "jobs"), 0);
    CHECK(strcmp(cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(j0, "job")), "bert") == 0);
    CHECK(cJSON_GetObjectItemCaseSensitive(j0, "hedge") == NULL); /* reported none */
    const cJSON *j1 = cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(root, "jobs"), 1);
    CHECK(cJSON_GetNumberValue(cJSON_GetObjectItemCaseSensitive(
              cJSON_GetObjectItemCaseSensitive(j1, "hedge"), "hedges")) == 3);
    cJSON_Delete(root);
    free(json);
    /* Rank 1 last reported at 20: expired at 81, its share gone. */
    dsc_jobs_hedge(jobs, 81.0, &hs);
    CHECK_EQ_INT(hs.loaders, 1);
    CHECK_EQ_INT(hs.sum.hedges, 3);
    dsc_jobs_destroy(jobs);
}

int main(void) {
    test_hedge_sums();
    test_update_and_expiry();
    test_bounded();
    test_renderings();
    test_share();
    return TEST_DONE();
}
