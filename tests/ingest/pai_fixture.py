"""A small PAI 2020 trace in the exact schema (headerless CSV, the trace's column order), one job
per inference rule and one row per malformed-row path. Expected values are worked out by hand in
tests/ingest/test_pai.py from the rows below (line numbers are 1-based physical lines)."""

from __future__ import annotations

from pathlib import Path

import polars as pl

# pai_job_table: job_name,inst_id,user,status,start_time,end_time
JOB = """\
j01,id01,u1,Terminated,1000,3000
j02,id02,u1,Terminated,1000,6000
j03,id03,u2,Terminated,0,2000
j04,id04,u2,Running,500,
j05,id05,u3,Failed,100,200
j06,id06,u3,Terminated,1,600
j07,id07,u4,Terminated,1,2
j08,id08,u4,Terminated,1,2
j09,id09,u4,Terminated,1,2
j10,id10,u5,Terminated,1,2
j11,id11,u5,Terminated,1,2
j12,id12,u5,Waiting,1,

j13,id13,u6,Terminated,1,2
j14,id14,u6,Terminated,1,2
j15,id15,u6,Terminated,1,2
j16,id16,u7,Terminated,1,2
j17,id17,u7,Terminated,1,2
j18,id18,u7,Terminated,1,2
j19,id19,u8,Terminated,1,2
j20,id20,u8,Terminated,1,2
j21,id21,u8,Terminated,1,2
j22,id22,u9,Terminated,1,2
j23,id23,u9,Terminated,1,2
j24,id24,u9,Terminated,1,2
j90,id90,u1,Terminated,1,2,extra
j91,id91,u1,Terminated,abc,2
j92,id92,u1,Exploded,1,2
j01,id01,u1,Failed,1000,3000
j93,id93,u1,Failed,500,100
,id94,u1,Terminated,1,2
"""

# pai_task_table: job_name,task_name,inst_num,status,start_time,end_time,plan_cpu,plan_mem,plan_gpu,gpu_type
TASK = """\
j01,tensorflow,1.0,Terminated,1050,2950,600,29.296875,100.0,V100
j02,worker,1.0,Terminated,1100,5900,1200,58.59375,400.0,V100M32
j03,ps,2.0,Terminated,10,1990,800,20,,
j03,worker,4.0,Terminated,10,1990,600,30,100.0,V100
j04,PyTorchWorker,4.0,Running,500,,800,40,200.0,V100
j05,worker,2.0,Failed,100,200,400,10,100.0,P100
j06,tensorflow,1.0,Terminated,1,600,400,10,50.0,T4
j07,worker,1.0,Terminated,1,2,400,10,100.0,MISC
j08,worker,1.0,Terminated,1,2,400,10,100.0,V100
j09,worker,1.0,Terminated,1,2,400,10,100.0,V100
j10,worker,1.0,Terminated,1,2,400,10,,
j11,evaluator,1.0,Terminated,1,2,400,10,100.0,V100
j13,worker,3.0,Terminated,1,2,400,10,100.0,V100
j14,worker,1.0,Terminated,1,2,600,10,abc,V100
j15,worker,2.0,Terminated,100,400,400,10,100.0,V100
j16,chief,1.0,Terminated,1000,2000,400,10,100.0,V100
j16,worker,2.0,Terminated,1000,2000,400,10,100.0,V100
j16,evaluator,1.0,Terminated,1000,2000,400,10,100.0,V100
j17,worker,1.0,Terminated,100,900,400,10,100.0,V100
j18,worker,1.0,Terminated,1,2,600,10,-100.0,V100
j19,worker,2.5,Terminated,1,2,600,10,100.0,V100
j20,worker,1.0,Terminated
j21,worker,1.0,Terminated,1,2,600,10,100.0,V100
j21,worker,2.0,Terminated,1,2,600,10,100.0,V100
j22,worker,1.0,Terminated,1,2,600,10,100.0,V100
j23,worker,1.0,Terminated,1,2,600,10,100.0,V100
j24,worker,1.0,Terminated,1,2,600,10,100.0,V100
j99,worker,1.0,Terminated,1,2,600,10,100.0,V100
"""

# pai_instance_table: job_name,task_name,inst_name,worker_name,inst_id,status,start_time,end_time,machine
INSTANCE = """\
j01,tensorflow,in01,w01,id01,Terminated,1100,1700,m1
j02,worker,in02,w02,id02,Terminated,2000,5000,m2
j03,ps,in03a,w03a,id03,Terminated,100,1100,m3
j03,ps,in03b,w03b,id03,Terminated,100,1100,m3
j03,worker,in03c,w03c,id03,Terminated,100,1100,m3
j03,worker,in03d,w03d,id03,Terminated,100,1100,m3
j03,worker,in03e,w03e,id03,Terminated,150,1050,m4
j03,worker,in03f,w03f,id03,Terminated,150,1050,m4
j04,PyTorchWorker,in04a,w04a,id04,Running,500,1500,m1
j04,PyTorchWorker,in04b,w04b,id04,Running,500,1500,m1
j04,PyTorchWorker,in04c,w04c,id04,Running,500,1500,m4
j04,PyTorchWorker,in04d,w04d,id04,Running,500,1500,m4
j05,worker,in05a,w05a,id05,Failed,120,180,m5
j05,worker,in05b,w05b,id05,Failed,120,190,m5
j06,tensorflow,in06,w06,id06,Terminated,100,500,m6
j13,worker,in13a,w13a,id13,Terminated,10,20,m3
j13,worker,in13b,w13b,id13,Terminated,10,20,m3
j13,worker,in13c,w13c,id13,Terminated,10,30,m4
j16,chief,in16a,w16a,id16,Terminated,1000,2000,m1
j16,worker,in16b,w16b,id16,Terminated,1000,2000,m1
j16,worker,in16c,w16c,id16,Terminated,1000,2000,m1
j16,evaluator,in16d,w16d,id16,Terminated,1000,2000,m4
j17,worker,in17,w17,id17,Failed,100,200,m1
j17,worker,in17,w17,id17,Terminated,300,900,m4
j22,worker,in22,w22,id22,Terminated,500,100,m1
j23,worker,in23,w23,id23,Terminated,1,2
j99,worker,in99,w99,id99,Terminated,1,2,m1
"""

# pai_machine_spec: machine,gpu_type,cap_cpu,cap_mem,cap_gpu
MACHINE_SPEC = """\
m1,V100,96,512,8
m2,V100M32,96,512,8
m3,V100,96,512,8
m4,V100,96,512,8
m5,P100,64,256,2
m6,T4,96,512,2
m7,T4,96,512,-2
m1,V100,96,512,4
"""

# pai_group_tag_table: inst_id,user,gpu_type_spec,group,workload
GROUP_TAG = """\
id01,u1,V100,g1,bert
id02,u1,V100M32,g2,resnet
id03,u2,,g3,ctr
id04,u2,,g4,graphlearn
id05,u3,P100,g5,nmt
id06,u3,T4,g6,bert
id07,u4,,g7,bert
id08,u4,,g8,
id09,u4,,g9,xlnet
id10,u5,,g10,bert
id11,u5,,g11,bert
id13,u6,,g13,resnet
id15,u6,,g15,bert
id16,u7,,g16,bert
id17,u7,,g17,resnet
id22,u9,,g22,bert
id23,u9,,g23,bert
id24,u9,g24,bert
id99,u1,,g99,bert
"""

# pai_sensor_table: job_name,task_name,worker_name,inst_id,machine,gpu_name,cpu_usage,gpu_wrk_util,avg_mem,max_mem,
#                   avg_gpu_wrk_mem,max_gpu_wrk_mem,read,write,read_count,write_count
SENSOR = """\
j01,tensorflow,w01,id01,m1,/dev/nvidia0,140.0,40.0,1.5,2.5,1.0,2.0,100,100,10,10
j02,worker,w02,id02,m2,/dev/nvidia0,140.0,n/a,1.5,2.5,1.0,3.0,100,100,10,10
j03,worker,w03c,id03,m3,/dev/nvidia0,100,20.0,1,1,1,1.5,0,0,0,0
j03,worker,w03d,id03,m3,/dev/nvidia1,100,30.0,1,1,1,2.5,0,0,0,0
j03,ps,w03a,id03,m3,,100,0,1,1,0,0,0,0,0,0
j99,worker,w99x,id99,m1,/dev/nvidia0,100,50,1,1,1,1,0,0,0,0
"""

TABLES = {
    "pai_job_table": JOB,
    "pai_task_table": TASK,
    "pai_instance_table": INSTANCE,
    "pai_machine_spec": MACHINE_SPEC,
    "pai_group_tag_table": GROUP_TAG,
    "pai_sensor_table": SENSOR,
}


def write_pai(directory: Path, tables: dict[str, str] | None = None) -> Path:
    """Write the fixture tables as ``pai_<table>.csv`` into ``directory``; return it."""
    directory.mkdir(parents=True, exist_ok=True)
    for stem, text in (tables or TABLES).items():
        (directory / f"{stem}.csv").write_text(text)
    return directory


def by_job(population: pl.DataFrame) -> dict[str, dict]:
    """Population rows by job_id."""
    return {r["job_id"]: r for r in population.iter_rows(named=True)}
